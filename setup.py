"""Generates the gRPC/protobuf Python stubs from protos/ at build time.

The stubs are build output, never committed and never edited by hand: both a
regular install (into the wheel's build directory) and an editable install
(into the source tree, git-ignored) run protoc from grpcio-tools here.
"""
from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent.resolve()
PROTO_DIR = ROOT / "protos"
PROTO_FILES = ("common.proto", "destination_sdk.proto")
PACKAGE_SUBDIR = Path("destination") / "protocol"


def generate_stubs(out_dir: Path) -> None:
    """Run protoc on protos/ and write *_pb2.py, *_pb2.pyi and *_pb2_grpc.py to out_dir."""
    import grpc_tools
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(PROTO_DIR / name) for name in PROTO_FILES),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {PROTO_DIR}")


class BuildPyWithStubs(build_py):
    def run(self) -> None:
        super().run()
        target = ROOT if getattr(self, "editable_mode", False) else Path(self.build_lib)
        generate_stubs(target / PACKAGE_SUBDIR)


setup(cmdclass={"build_py": BuildPyWithStubs})
