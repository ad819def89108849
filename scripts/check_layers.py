#!/usr/bin/env python3
"""Fail when a lower layer names a higher one (scripts/test.sh runs this).

Three rules, each read from the code itself:

1. Crates: the workspace's crates form layers (CRATE_LAYERS below); a crate's
   Cargo.toml may depend only on workspace crates of a lower layer.
2. The runner's modules: runner/src/lib.rs lists them in numbered layers under its
   "# Layers" heading; a module may name (`crate::m`, `use crate::{m, ..}`) only
   modules of a lower layer. Items at the crate root (`usage`, `crash_point!`) are
   open to every module.
3. kafka_to_bq's stages: runner/src/kafka_to_bq/mod.rs lists them in numbered
   layers under "# Layout, by stage"; a file of one stage may name
   (`crate::kafka_to_bq::x`, or `super::x` from a file at the folder's top) only its
   own stage or a lower one.
4. Inside a module folder, the files' `super::x` / `crate::m::x` references form no
   cycle (mod.rs, which only declares and re-exports, is left out).

Comments and doc comments are ignored, so a doc link upwards is not an import.
Prints every violation and exits 1, or prints one line and exits 0.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "runner" / "src"

# Pure cores at the bottom, the web pages above them, the runner (I/O) on top.
CRATE_LAYERS = [
    {"flexrun-templates", "flexrun-autoscaler", "flexrun-generator"},
    # The estimate sizes its pool with the autoscaler's one sizing rule (`pool_for`).
    {"flexrun-estimator"},
    {"flexrun-simulate"},
    {"flexrun-web"},
    {"flexrun"},
]
CRATE_DIRS = {"templates", "autoscaler", "estimator", "generator", "simulate", "web", "runner"}


def code_of(path):
    """The file's text without comments or string literals' contents."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.lstrip()
        if stripped.startswith("//"):
            continue
        line = re.sub(r'"(?:[^"\\]|\\.)*"', '""', line)
        out.append(line.split("//", 1)[0])
    return "\n".join(out)


def names_after(prefix, code):
    """Top-level names referenced as `prefix::name` or inside `prefix::{a, b::c}`."""
    names = set(re.findall(re.escape(prefix) + r"::([a-z_][a-z0-9_]*)\b", code))
    for group in re.findall(re.escape(prefix) + r"::\{([^}]*)\}", code, re.S):
        for item in group.split(","):
            head = item.strip().split("::")[0].split(" ")[0]
            if re.fullmatch(r"[a-z_][a-z0-9_]*", head) and head != "self":
                names.add(head)
    return names


def check_crates(problems):
    layer = {name: i for i, names in enumerate(CRATE_LAYERS) for name in names}
    for d in sorted(CRATE_DIRS):
        toml = (ROOT / d / "Cargo.toml").read_text(encoding="utf-8")
        me = re.search(r'^name\s*=\s*"([^"]+)"', toml, re.M).group(1)
        deps = toml.split("[dependencies]", 1)[-1].split("\n[", 1)[0]
        for dep in re.findall(r"^(flexrun[a-z-]*)\s*[.=]", deps, re.M):
            if layer.get(dep, -1) >= layer[me]:
                problems.append(f"{d}/Cargo.toml: crate {me} (layer {layer[me] + 1}) depends on {dep} (layer {layer.get(dep, -1) + 1})")


def module_layers():
    lib = (SRC / "lib.rs").read_text(encoding="utf-8")
    section = lib.split("//! # Layers", 1)[1].split("//! #", 1)[0]
    layers = {}
    for n, names in re.findall(r"^//! (\d+)\. (.+)$", section, re.M):
        for name in re.findall(r"`([a-z_][a-z0-9_]*)`", names):
            layers[name] = int(n)
    return layers


def check_modules(problems):
    layers = module_layers()
    declared = set(re.findall(r"^pub mod ([a-z_0-9]+);", (SRC / "lib.rs").read_text(encoding="utf-8"), re.M))
    for m in sorted(declared - set(layers)):
        problems.append(f"runner/src/lib.rs: module {m} is in no layer of the '# Layers' list")
    for path in sorted(SRC.rglob("*.rs")):
        rel = path.relative_to(SRC)
        me = rel.parts[0].removesuffix(".rs")
        if me in ("lib", "main"):
            continue
        for used in sorted(names_after("crate", code_of(path)) & set(layers)):
            if used != me and layers[used] >= layers[me]:
                problems.append(
                    f"runner/src/{rel}: {me} (layer {layers[me]}) names crate::{used} (layer {layers[used]})"
                )


def stage_layers():
    text = (SRC / "kafka_to_bq" / "mod.rs").read_text(encoding="utf-8")
    section = text.split("//! # Layout, by stage", 1)[1].split("//! #", 1)[0]
    stages = {}
    for n, body in re.findall(r"^//! (\d+)\. ((?:.|\n//!    )+)", section, re.M):
        for name in re.findall(r"\[`([a-z_]+)`\]:", body):
            stages[name] = int(n)
    return stages


def check_stages(problems):
    stages = stage_layers()
    top = SRC / "kafka_to_bq"
    declared = set(re.findall(r"^pub mod ([a-z_0-9]+);", (top / "mod.rs").read_text(encoding="utf-8"), re.M))
    for m in sorted(declared - set(stages)):
        problems.append(f"runner/src/kafka_to_bq/mod.rs: module {m} is in no stage of '# Layout, by stage'")
    for path in sorted(top.rglob("*.rs")):
        rel = path.relative_to(top)
        me = rel.parts[0].removesuffix(".rs")
        if me == "mod":
            continue
        code = code_of(path)
        used = names_after("crate::kafka_to_bq", code)
        if len(rel.parts) == 1:
            used |= names_after("super", code)
        for u in sorted(used & set(stages)):
            if u != me and stages[u] > stages[me]:
                problems.append(
                    f"runner/src/kafka_to_bq/{rel}: stage {me} ({stages[me]}) names {u} ({stages[u]})"
                )


def file_cycles(problems):
    for folder in sorted(p for p in SRC.rglob("*") if p.is_dir()):
        files = {p.stem: p for p in folder.glob("*.rs") if p.stem != "mod"}
        graph = {}
        for stem, path in files.items():
            code = code_of(path)
            modpath = "::".join(folder.relative_to(SRC).parts)
            used = names_after("super", code) | names_after(f"crate::{modpath}", code)
            graph[stem] = sorted(u for u in used if u in files and u != stem)
        state = {}

        def visit(node, trail):
            state[node] = "open"
            for nxt in graph[node]:
                if state.get(nxt) == "open":
                    cycle = trail[trail.index(nxt):] + [nxt]
                    problems.append(f"runner/src/{folder.relative_to(SRC)}/: files import each other: {' -> '.join(cycle)}")
                elif nxt not in state:
                    visit(nxt, trail + [nxt])
            state[node] = "done"

        for stem in sorted(graph):
            if stem not in state:
                visit(stem, [stem])


def main():
    problems = []
    check_crates(problems)
    check_modules(problems)
    check_stages(problems)
    file_cycles(problems)
    if problems:
        print("layering: a lower layer names a higher one (see runner/src/lib.rs, '# Layers'):", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    print(f"layering: {len(module_layers())} runner modules in layers and {len(stage_layers())} kafka_to_bq stages, every import points down", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
