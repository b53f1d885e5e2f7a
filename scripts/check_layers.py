#!/usr/bin/env python3
"""The layering of zipmoe's code, checked over every #include (issue 38; docs/architecture.md "Layers").

  check_layers.py [--root DIR]      exit 0 when no include goes up a floor, 1 naming each one that does
  check_layers.py --self-test       plants an upward include in a scratch tree and checks it is caught

Floors, lowest first (a file may include its own folder or any lower floor, nothing beside or above):
  0 schemas/                                   generated message types
  1 common/                                    ground: status, files, tokenizer, messaging, formats
  2 kernels/                                   CPU/CUDA kernels
  3 services/{storage,decompressor,cache_manager,scheduler,synth,convert}
                                               the paper's components and tools, libraries only
  4 services/pipeline/                         the embedded pipeline that wires them in one process
  5 services/links/                            what carries the pipeline between the processes of `up`
  6 services/service_base/                     the plumbing every process shares (config, metrics)
  7 services/executor/                         the model's forward pass
  8 services/api/                              the OpenAI-compatible HTTP API
  9 services/front/                            the HTTP front of `up` (re-issues requests when the executor dies)
 10 services/processes/, services/cli/        each process's entry (`zipmoe service NAME`) and the CLI
Within floor 3 the folders are independent (a component never includes another). A folder under
services/ that has no floor here is itself an error: a new folder must be given its place. tests/, bench/ and
tools above everything are not checked. Standard library only.
"""
import argparse
import os
import re
import sys
import tempfile

COMPONENTS = ("storage", "decompressor", "cache_manager", "scheduler", "synth", "convert")
FLOORS = {"schemas": 0, "common": 1, "kernels": 2, "services/pipeline": 4, "services/links": 5,
          "services/service_base": 6, "services/executor": 7, "services/api": 8, "services/front": 9,
          "services/processes": 10, "services/cli": 10}
for _c in COMPONENTS:
    FLOORS["services/" + _c] = 3
CHECKED_DIRS = ("schemas", "common", "kernels", "services")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def unit_of(path):
    """(folder, floor) of a repository-relative path, or None for a path outside the layering."""
    parts = path.split("/")
    folder = "/".join(parts[:2]) if parts[0] == "services" and len(parts) > 2 else parts[0]
    if folder not in FLOORS:
        return None
    return folder, FLOORS[folder]


def violations(root):
    found = []
    for top in CHECKED_DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc", ".cu", ".cuh")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                src = unit_of(rel)
                if src is None:
                    if rel.startswith("services/") and rel.count("/") >= 2:
                        found.append(f"{rel}: folder {'/'.join(rel.split('/')[:2])} has no floor "
                                     "(give it one in scripts/check_layers.py and docs/architecture.md)")
                    continue
                with open(os.path.join(dirpath, name), errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or "/" not in m.group(1):
                            continue
                        dst = unit_of(m.group(1))
                        if dst is None or dst[0] == src[0]:
                            continue
                        if dst[1] > src[1] or (dst[1] == src[1] == 3):
                            why = "a component includes another" if dst[1] == src[1] else \
                                f"floor {src[1]} includes floor {dst[1]}"
                            found.append(f"{rel}:{lineno}: includes \"{m.group(1)}\" ({why}: {src[0]} -> {dst[0]})")
    return found


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        def write(rel, text):
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), "w") as f:
                f.write(text)
        write("common/ok.h", '#include "schemas/x.h"\n')
        write("services/api/ok.cc", '#include "services/service_base/service_metrics.h"\n')
        write("services/processes/scheduler_service.cc", '#include "services/pipeline/offload_provider.h"\n')
        if violations(tmp):
            print("check_layers self-test: a downward include was reported", file=sys.stderr)
            return 1
        write("services/pipeline/planted.cc", '#include "services/links/remote_provider.h"\n')
        write("services/storage/planted.h", '#include "services/scheduler/policy.h"\n')
        write("services/nowhere/planted.h", '#include "common/status.h"\n')
        found = violations(tmp)
        want = ["services/pipeline/planted.cc:1", "services/storage/planted.h:1", "services/nowhere/planted.h"]
        if len(found) != 3 or not all(any(f.startswith(w) for f in found) for w in want):
            print(f"check_layers self-test: expected the three planted faults, got {found}", file=sys.stderr)
            return 1
        print("check_layers self-test: the planted upward includes were caught:\n  " + "\n  ".join(found))
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    found = violations(os.path.abspath(args.root))
    for f in found:
        print(f, file=sys.stderr)
    if found:
        print(f"check_layers: {len(found)} include(s) go up a floor (see scripts/check_layers.py)", file=sys.stderr)
        return 1
    print("check_layers: every include goes down a floor or stays in its folder")
    return 0


if __name__ == "__main__":
    sys.exit(main())
