"""What a job pays for the Action's image before its first case: the download and the start-up.

  pull       the image as a registry sends it: `docker save` gzip-compressed (registries store layers as
             gzipped tars), and unpacked (`docker image inspect` .Size).
  container  `docker run` of the image with a no-op entrypoint: creating and starting a container.
  first case `docker run` of the Action (baseline mode, the workspace mounted as GitHub's runner mounts
             it) until its first op call, recorded by the op itself in the workspace; and the whole step to its exit.
  byte code  the imports of one process of a job (the entrypoint's and each worker's: gpuemu-ci, numpy,
             httpx, cryptography, jinja2, yaml, msgspec) with the byte code the image compiles at build time
             and without it (deleted in a throwaway container), interleaved; the ratio is what compiling buys.

Every figure is the median of --rounds, and the byte-code ratio is measured side by side in one container,
since absolute times on a shared machine are not stable. Needs a Docker daemon (DOCKER_HOST) and a built image:

    python bench/bench_image_startup.py --image gpuemu-ci-action:ci [--rounds 3] [--no-pull-size]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

CONFIG = """\
[project]
name = "startup"

[validation]
dtypes = ["float32"]
seed = 1

[ci]
quick_dtypes = ["float32"]
quick_iterations = 2
parallel_jobs = 1

[[ops]]
name = "scale"
op = "ops:scale"
reference = "ops:scale_ref"
family = "elementwise"
[ops.dims]
N = [8, 16]
[ops.inputs]
x = ["N"]
"""

OPS = """\
import os, time

def scale(x):
    if not os.path.exists("first_call"):  # written by the runner's uid, which owns the workspace
        with open("first_call", "w") as f:
            f.write(repr(time.time()))
    return x * 2

def scale_ref(x):
    return x * 2.0
"""

IMPORTS = (
    "import gpuemu_ci.cli.main, gpuemu_ci.action.main, gpuemu_ci.action.gate, numpy, httpx, jinja2, yaml, "
    "msgspec, cryptography.hazmat.primitives.asymmetric.ed25519"
)

# "From source": a pycache prefix where no byte code is (PYTHONPYCACHEPREFIX; the image's PYTHONDONTWRITEBYTECODE
# keeps it empty), so every module is compiled on import, as in an image built without byte code.
BYTE_CODE_PROBE = """
import json, os, pathlib, statistics, subprocess, sys, sysconfig, tempfile, time
rounds, imports = int(sys.argv[1]), sys.argv[2]
scratch = tempfile.gettempdir()
def timed(**env):
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", imports], check=True, cwd=scratch, env={**os.environ, **env})
    return time.perf_counter() - start
compiled, source = [], []
for _ in range(rounds):
    compiled.append(timed())
    source.append(timed(PYTHONPYCACHEPREFIX=os.path.join(scratch, "no-byte-code")))
pyc = sum(1 for _ in pathlib.Path(sysconfig.get_path("stdlib")).rglob("*.pyc"))
print(json.dumps({"compiled": statistics.median(compiled), "source": statistics.median(source), "pyc": pyc}))
"""


def docker(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"docker {args[0]} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return done


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, capture_output=True, check=True)
    return time.perf_counter() - start


def pull_size(image: str) -> int:
    """Bytes of the image's layers gzip-compressed, as a registry stores and sends them."""
    save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
    gzip = subprocess.run(["gzip", "-c"], stdin=save.stdout, capture_output=True, check=True)
    save.wait()
    return len(gzip.stdout)


def action_start(image: str) -> tuple[float, float]:
    """(seconds from `docker run` to the first op call, seconds to the step's exit) for one baseline step."""
    with tempfile.TemporaryDirectory() as scratch:
        workspace = Path(scratch) / "workspace"
        commands = Path(scratch) / "file_commands"
        workspace.mkdir()
        commands.mkdir()
        (workspace / "gpuemu.toml").write_text(CONFIG)
        (workspace / "ops.py").write_text(OPS)
        (commands / "output").write_text("")
        (commands / "summary").write_text("")
        (commands / "event.json").write_text("{}")
        for path in [workspace, *workspace.iterdir(), commands, *commands.iterdir()]:
            os.chown(path, 1001, 1001)  # the runner's uid owns the workspace on GitHub's runners
        env = {
            "INPUT_MODE": "baseline", "INPUT_CONFIG": "gpuemu.toml", "INPUT_SUITE": "quick",
            "INPUT_BASELINE": "none",
            "INPUT_COMMENT": "false", "INPUT_OUTPUT_DIR": "gpuemu-out", "INPUT_CACHE_DIR": ".gpuemu-cache",
            "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": "/github/workspace", "GITHUB_EVENT_NAME": "push",
            "GITHUB_EVENT_PATH": "/github/file_commands/event.json", "GITHUB_REPOSITORY": "octo-org/kernels",
            "GITHUB_SHA": "0" * 40, "GITHUB_REF": "refs/heads/main", "GITHUB_RUN_ID": "1",
            "HOME": "/github/file_commands",  # the runner always sets one (/github/home)
            "GITHUB_OUTPUT": "/github/file_commands/output",
            "GITHUB_STEP_SUMMARY": "/github/file_commands/summary",
        }  # fmt: skip
        command = ["docker", "run", "--rm", "--network", "none", "--workdir", "/github/workspace"]
        command += [f"-v{workspace}:/github/workspace", f"-v{commands}:/github/file_commands"]
        for key, value in env.items():
            command += ["-e", f"{key}={value}"]
        start = time.time()
        done = subprocess.run([*command, image], capture_output=True, text=True, check=False)
        end = time.time()
        if done.returncode != 0 or not (workspace / "first_call").exists():
            raise SystemExit(
                f"the Action's step failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
            )
        return float((workspace / "first_call").read_text()) - start, end - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--image", default=os.environ.get("GPUEMU_CONTAINER_IMAGE", "gpuemu-ci-action:ci"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-pull-size", action="store_true", help="skip the gzip of the whole image")
    args = parser.parse_args()
    if shutil.which("docker") is None:
        raise SystemExit("bench_image_startup: no docker client")
    image = args.image
    size = int(docker("image", "inspect", "--format", "{{.Size}}", image).stdout)
    print(f"image {image}: {size / 1e6:,.0f} MB unpacked", end="")
    print("" if args.no_pull_size else f", {pull_size(image) / 1e6:,.0f} MB to pull (gzip-compressed layers)")

    noop = [
        timed(["docker", "run", "--rm", "--network", "none", "--entrypoint", "true", image])
        for _ in range(args.rounds)
    ]
    starts = [action_start(image) for _ in range(args.rounds)]
    first = statistics.median(s[0] for s in starts)
    whole = statistics.median(s[1] for s in starts)
    print(f"docker run, no-op entrypoint:     {statistics.median(noop):6.2f} s")
    print(f"docker run to the first case:     {first:6.2f} s   (median of {args.rounds})")
    print(f"docker run to the step's exit:    {whole:6.2f} s   (one op, 4 cases, baseline mode)")

    probe = docker("run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-c", BYTE_CODE_PROBE,
                   str(args.rounds), IMPORTS)  # fmt: skip
    figures = json.loads(probe.stdout)
    compiled, source = figures["compiled"], figures["source"]
    print(f"one process's imports, with the byte code the build compiled ({figures['pyc']} files): "
          f"{compiled:.2f} s; from source: {source:.2f} s; ratio {source / compiled:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
