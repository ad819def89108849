package flexrun;

import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.security.auth.callback.Callback;
import javax.security.auth.callback.UnsupportedCallbackException;
import javax.security.auth.login.AppConfigurationEntry;
import org.apache.kafka.common.security.auth.AuthenticateCallbackHandler;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerExtensionsValidatorCallback;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerToken;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallback;

/**
 * The local broker's stand-in for Google Managed Kafka's token check: it accepts the
 * token Google's GcpLoginCallbackHandler makes (googleapis/managedkafka,
 * kafka-java-auth) and nothing else. Three base64url parts: the header
 * {"typ":"JWT","alg":"GOOG_OAUTH2_TOKEN"}; the claims exp (in the future), iat, scope
 * "kafka" and sub (the principal); and the Google access token itself, which must start
 * with the JAAS option googleAccessTokenPrefix (the local token endpoint's tokens).
 * Google checks the access token with its own servers; this checks its shape.
 */
public class GoogleTokenValidator implements AuthenticateCallbackHandler {
  private String prefix = "ya29.";

  @Override
  public void configure(Map<String, ?> configs, String mechanism, List<AppConfigurationEntry> entries) {
    Object p = entries.get(0).getOptions().get("googleAccessTokenPrefix");
    if (p != null) {
      prefix = p.toString();
    }
  }

  @Override
  public void close() {}

  @Override
  public void handle(Callback[] callbacks) throws UnsupportedCallbackException {
    for (Callback c : callbacks) {
      if (c instanceof OAuthBearerValidatorCallback) {
        validate((OAuthBearerValidatorCallback) c);
      } else if (c instanceof OAuthBearerExtensionsValidatorCallback) {
        OAuthBearerExtensionsValidatorCallback e = (OAuthBearerExtensionsValidatorCallback) c;
        e.inputExtensions().map().forEach((k, v) -> e.valid(k));
      } else {
        throw new UnsupportedCallbackException(c);
      }
    }
  }

  private void validate(OAuthBearerValidatorCallback cb) {
    String value = cb.tokenValue();
    String[] parts = value.split("\\.", -1);
    if (parts.length != 3) {
      cb.error("invalid_token", null, null);
      return;
    }
    String header, claims, access;
    try {
      header = decode(parts[0]);
      claims = decode(parts[1]);
      access = decode(parts[2]);
    } catch (IllegalArgumentException e) {
      cb.error("invalid_token", null, null);
      return;
    }
    String alg = text(header, "alg");
    String scope = text(claims, "scope");
    String sub = text(claims, "sub");
    long exp = number(claims, "exp");
    long now = System.currentTimeMillis();
    if (!"GOOG_OAUTH2_TOKEN".equals(alg) || !"JWT".equals(text(header, "typ"))) {
      cb.error("invalid_token", null, null);
    } else if (!"kafka".equals(scope)) {
      cb.error("insufficient_scope", "kafka", null);
    } else if (sub == null || sub.isEmpty() || exp * 1000 <= now || !access.startsWith(prefix)) {
      cb.error("invalid_token", null, null);
    } else {
      cb.token(token(value, sub, exp * 1000, number(claims, "iat") * 1000));
    }
  }

  private static String decode(String part) {
    return new String(Base64.getUrlDecoder().decode(part), StandardCharsets.UTF_8);
  }

  private static String text(String json, String name) {
    Matcher m = Pattern.compile("\"" + name + "\"\\s*:\\s*\"([^\"]*)\"").matcher(json);
    return m.find() ? m.group(1) : null;
  }

  private static long number(String json, String name) {
    Matcher m = Pattern.compile("\"" + name + "\"\\s*:\\s*(\\d+)").matcher(json);
    return m.find() ? Long.parseLong(m.group(1)) : 0;
  }

  private static OAuthBearerToken token(String value, String sub, long lifetimeMs, long startMs) {
    return new OAuthBearerToken() {
      public String value() { return value; }
      public Set<String> scope() { return Set.of("kafka"); }
      public long lifetimeMs() { return lifetimeMs; }
      public String principalName() { return sub; }
      public Long startTimeMs() { return startMs; }
    };
  }
}
