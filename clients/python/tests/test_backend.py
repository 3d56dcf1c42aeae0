"""The in-tree build backend (_build/backend.py): wheels, sdists and editable wheels made with the standard library only,
checked as pip and installers read them (RECORD hashes, METADATA), reproducible, and buildable again from the sdist."""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib
import io
import os
import shutil
import sys
import tarfile
import tempfile
import unittest
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Any, Dict

ROOT = Path(__file__).resolve().parent.parent
HAS_SOURCE_TREE = (ROOT / "_build" / "backend.py").is_file()


def load_backend(root: Path) -> Any:
    sys.path.insert(0, str(root / "_build"))
    try:
        sys.modules.pop("backend", None)
        return importlib.import_module("backend")
    finally:
        sys.path.pop(0)
        sys.modules.pop("backend", None)


def read_wheel(path: Path) -> Dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


@unittest.skipUnless(HAS_SOURCE_TREE, "needs the source tree (clients/python)")
class BackendTests(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="servegate-backend-"))
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.backend = load_backend(ROOT)

    def check_record(self, files: Dict[str, bytes]) -> None:
        record = next(n for n in files if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO(files[record].decode())))
        self.assertEqual(sorted(r[0] for r in rows), sorted(files))
        for name, digest, size in rows:
            if name == record:
                self.assertEqual((digest, size), ("", ""))
                continue
            expected = base64.urlsafe_b64encode(hashlib.sha256(files[name]).digest()).rstrip(b"=").decode()
            self.assertEqual(digest, f"sha256={expected}", name)
            self.assertEqual(int(size), len(files[name]), name)

    def test_no_build_requirements(self) -> None:
        for hook in ("get_requires_for_build_wheel", "get_requires_for_build_sdist", "get_requires_for_build_editable"):
            self.assertEqual(getattr(self.backend, hook)(), [], hook)

    def test_wheel(self) -> None:
        name = self.backend.build_wheel(str(self.tmp))
        self.assertEqual(name, "servegate-0.1.0-py3-none-any.whl")
        files = read_wheel(self.tmp / name)
        package = sorted(n for n in files if n.startswith("servegate/"))
        sources = sorted(
            f"servegate/{p.name}" for p in (ROOT / "src" / "servegate").iterdir() if p.suffix == ".py" or p.name == "py.typed"
        )
        self.assertEqual(package, sources)
        self.assertIn("servegate/py.typed", package)
        self.check_record(files)
        wheel = Parser().parsestr(files["servegate-0.1.0.dist-info/WHEEL"].decode())
        self.assertEqual((wheel["Wheel-Version"], wheel["Root-Is-Purelib"], wheel["Tag"]), ("1.0", "true", "py3-none-any"))
        meta = Parser().parsestr(files["servegate-0.1.0.dist-info/METADATA"].decode())
        self.assertEqual((meta["Metadata-Version"], meta["Name"], meta["Version"]), ("2.1", "servegate", "0.1.0"))
        self.assertEqual(meta["Requires-Python"], ">=3.9")
        self.assertIn("Typing :: Typed", meta.get_all("Classifier"))
        self.assertIn("# servegate", meta.get_payload())
        self.assertIsNone(meta["Requires-Dist"])

    def test_wheels_are_reproducible(self) -> None:
        a, b = self.tmp / "a", self.tmp / "b"
        name = self.backend.build_wheel(str(a))
        self.backend.build_wheel(str(b))
        self.assertEqual((a / name).read_bytes(), (b / name).read_bytes())

    def test_metadata_hook_matches_the_wheel(self) -> None:
        dist_info = self.backend.prepare_metadata_for_build_wheel(str(self.tmp / "meta"))
        self.assertEqual(dist_info, "servegate-0.1.0.dist-info")
        files = read_wheel(self.tmp / self.backend.build_wheel(str(self.tmp)))
        self.assertEqual((self.tmp / "meta" / dist_info / "METADATA").read_bytes(), files[f"{dist_info}/METADATA"])

    def test_sdist_builds_the_same_wheel(self) -> None:
        name = self.backend.build_sdist(str(self.tmp))
        self.assertEqual(name, "servegate-0.1.0.tar.gz")
        with tarfile.open(self.tmp / name) as tf:
            names = tf.getnames()
            self.assertTrue(all(n.startswith("servegate-0.1.0/") for n in names))
            for required in ("PKG-INFO", "pyproject.toml", "README.md", "_build/backend.py", "src/servegate/__init__.py", "src/servegate/py.typed"):
                self.assertIn(f"servegate-0.1.0/{required}", names)
            self.assertFalse([n for n in names if "__pycache__" in n or n.endswith(".pyc")])
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tf.extractall(self.tmp / "unpacked", **safe)  # noqa: S202 - our own archive
        unpacked = self.tmp / "unpacked" / "servegate-0.1.0"
        from_sdist = load_backend(unpacked)
        cwd = os.getcwd()
        os.chdir(unpacked)
        try:
            wheel_from_sdist = read_wheel(self.tmp / "w1" / from_sdist.build_wheel(str(self.tmp / "w1")))
        finally:
            os.chdir(cwd)
        wheel_from_tree = read_wheel(self.tmp / "w2" / self.backend.build_wheel(str(self.tmp / "w2")))
        self.assertEqual(wheel_from_sdist, wheel_from_tree)

    def test_editable_wheel_points_at_src(self) -> None:
        files = read_wheel(self.tmp / self.backend.build_editable(str(self.tmp)))
        self.check_record(files)
        self.assertEqual(files["__editable__.servegate.pth"].decode().strip(), str(ROOT / "src"))
        self.assertFalse([n for n in files if n.startswith("servegate/")])

    def test_source_date_epoch(self) -> None:
        os.environ["SOURCE_DATE_EPOCH"] = "1767225600"  # 2026-01-01
        try:
            files = zipfile.ZipFile(self.tmp / self.backend.build_wheel(str(self.tmp)))
            self.assertEqual(files.infolist()[0].date_time[:3], (2026, 1, 1))
        finally:
            del os.environ["SOURCE_DATE_EPOCH"]

    def test_toml_reader_without_tomllib_agrees(self) -> None:
        text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
        simple = self.backend._read_simple_toml(text)
        self.assertEqual(simple["project"]["name"], "servegate")
        self.assertEqual(simple["build-system"], {"requires": [], "build-backend": "backend", "backend-path": ["_build"]})
        try:
            import tomllib  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            return
        self.assertEqual(simple, tomllib.loads(text))

    def test_project_problems_are_named(self) -> None:
        tree = self.tmp / "tree"
        shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns("__pycache__"))
        backend = load_backend(tree)
        version = tree / "src" / "servegate" / "_version.py"
        version.write_text('__version__ = "9.9.9"\n', encoding="utf-8")
        with self.assertRaisesRegex(backend.BuildError, r"__version__ 9\.9\.9 differs from pyproject\.toml's 0\.1\.0"):
            backend.build_wheel(str(self.tmp))
        (tree / "README.md").unlink()
        version.write_text('__version__ = "0.1.0"\n', encoding="utf-8")
        with self.assertRaisesRegex(backend.BuildError, "readme .*README.md, which is missing"):
            backend.build_wheel(str(self.tmp))
        with self.assertRaisesRegex(backend.BuildError, "only strings and arrays"):
            backend._read_simple_toml("[project]\nversion = 1\n")
