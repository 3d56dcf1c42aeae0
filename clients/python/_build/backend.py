"""A PEP 517 / PEP 660 build backend for the servegate client that needs nothing but the standard library.

Why not setuptools: ``pip install --no-build-isolation`` (what works where no package index is reachable) runs the
backend in the target interpreter, and a bare interpreter has no ``wheel`` package, so setuptools cannot make a wheel
there ("invalid command 'bdist_wheel'"). This backend writes the wheel itself: a zip of ``src/servegate`` plus the
``.dist-info`` files (METADATA, WHEEL, RECORD) that the wheel format (PEP 427) asks for. It also writes an sdist and an
editable wheel (a ``.pth`` file naming ``src/``).

The project's metadata is read from ``pyproject.toml`` (``[project]``): with ``tomllib`` where the interpreter has it
(3.11+), else with a reader for the small part of TOML that file uses (tables, strings, arrays of strings). Outputs are
reproducible: fixed timestamps (``SOURCE_DATE_EPOCH`` when set), sorted entries, fixed permissions.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "servegate"
TAG = "py3-none-any"
GENERATOR = "servegate-build-backend"

# Files of the source tree that go into the sdist (besides the package itself), relative to ROOT.
SDIST_FILES = ("pyproject.toml", "README.md", "_build/backend.py")
SDIST_DIRS = ("src", "tests")

# ---------------------------------------------------------------------------------------------------------------
# pyproject.toml
# ---------------------------------------------------------------------------------------------------------------


class BuildError(Exception):
    """A problem with the project's own files: the message says which file and what."""


def _read_toml(text: str) -> Dict[str, Any]:
    try:
        import tomllib  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # Python 3.9, 3.10
        return _read_simple_toml(text)
    return tomllib.loads(text)


_TOML_KEY = r"[A-Za-z0-9_-]+"
_TOML_STRING = r'"(?:[^"\\\n]|\\.)*"'


def _toml_string(token: str, where: str) -> str:
    import json

    try:
        value = json.loads(token)  # TOML basic strings escape as JSON strings do, for what this file uses
    except ValueError:
        raise BuildError(f"pyproject.toml: {where}: cannot read the string {token}") from None
    if not isinstance(value, str):
        raise BuildError(f"pyproject.toml: {where}: expected a string")
    return value


def _read_simple_toml(text: str) -> Dict[str, Any]:
    """The part of TOML this project's pyproject.toml uses: [a.b] tables, key = "string", key = ["s", ...]."""
    doc: Dict[str, Any] = {}
    table = doc
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = _strip_comment(lines[i]).strip()
        i += 1
        if not line:
            continue
        m = re.fullmatch(r"\[(" + _TOML_KEY + r"(?:\." + _TOML_KEY + r")*)\]", line)
        if m:
            table = doc
            for part in m.group(1).split("."):
                table = table.setdefault(part, {})
            continue
        m = re.fullmatch(r"(" + _TOML_KEY + r")\s*=\s*(.*)", line)
        if not m:
            raise BuildError(f"pyproject.toml line {i}: cannot read {line!r} without tomllib (Python 3.11+)")
        key, value = m.group(1), m.group(2)
        if value.startswith("["):
            while not _strip_comment(value).rstrip().endswith("]"):
                if i >= len(lines):
                    raise BuildError(f"pyproject.toml: the array {key} is not closed")
                value += " " + _strip_comment(lines[i]).strip()
                i += 1
            inner = _strip_comment(value).strip()[1:-1]
            items = [s.strip() for s in re.findall(_TOML_STRING + r"|[^,\s][^,]*", inner)]
            table[key] = [_toml_string(s, key) for s in items if s]
        elif value.startswith('"'):
            table[key] = _toml_string(_strip_comment(value).strip(), key)
        else:
            raise BuildError(f"pyproject.toml line {i}: {key}: only strings and arrays of strings can be read")
    return doc


def _strip_comment(line: str) -> str:
    out, quoted, escaped = [], False, False
    for ch in line:
        if quoted:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch == "#":
            break
        out.append(ch)
    return "".join(out)


def _project(root: Path = ROOT) -> Dict[str, Any]:
    path = root / "pyproject.toml"
    project = _read_toml(path.read_text(encoding="utf-8")).get("project")
    if not isinstance(project, dict):
        raise BuildError(f"{path}: no [project] table")
    for field in ("name", "version"):
        if not isinstance(project.get(field), str) or not project[field]:
            raise BuildError(f"{path}: [project] {field} is required")
    if project.get("dynamic"):
        raise BuildError(f"{path}: this backend reads every field from [project]: 'dynamic' is not supported")
    version_file = root / "src" / PACKAGE / "_version.py"
    m = re.search(r'^__version__ = "([^"]+)"$', version_file.read_text(encoding="utf-8"), re.M)
    if not m or m.group(1) != project["version"]:
        raise BuildError(
            f"{version_file}: __version__ {m.group(1) if m else '(none)'} differs from pyproject.toml's {project['version']}"
        )
    if project.get("dependencies"):
        raise BuildError(f"{path}: the servegate client uses the standard library only: no dependencies")
    return project


def _dist_name(project: Mapping[str, Any]) -> str:
    """The name as wheel and sdist file names spell it (PEP 427, PEP 625)."""
    return re.sub(r"[-_.]+", "_", str(project["name"])).lower()


def _metadata(project: Mapping[str, Any], root: Path = ROOT) -> bytes:
    """Core metadata 2.4 (the METADATA / PKG-INFO file)."""
    lines = [
        "Metadata-Version: 2.4",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
    ]
    if project.get("description"):
        lines.append(f"Summary: {project['description']}")
    if project.get("license"):
        license_ = project["license"]
        # PEP 639: a string is an SPDX expression; the older table form is free text.
        if isinstance(license_, str):
            lines.append(f"License-Expression: {license_}")
        else:
            lines.append(f"License: {license_.get('text', '')}")
    if project.get("requires-python"):
        lines.append(f"Requires-Python: {project['requires-python']}")
    if project.get("keywords"):
        lines.append(f"Keywords: {','.join(project['keywords'])}")
    for classifier in project.get("classifiers", []):
        lines.append(f"Classifier: {classifier}")
    for label, url in (project.get("urls") or {}).items():
        lines.append(f"Project-URL: {label}, {url}")
    body = ""
    readme = project.get("readme")
    if readme:
        readme_path = root / (readme if isinstance(readme, str) else readme["file"])
        if not readme_path.is_file():
            raise BuildError(f"pyproject.toml names the readme {readme_path}, which is missing")
        lines.append("Description-Content-Type: text/markdown; charset=UTF-8")
        body = readme_path.read_text(encoding="utf-8")
    text = "\n".join(lines) + "\n"
    if body:
        text += "\n" + body
    return text.encode("utf-8")


# ---------------------------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------------------------


def _epoch() -> int:
    """SOURCE_DATE_EPOCH when set (reproducible builds), else 1980-01-01, the earliest time a zip file can hold."""
    value = os.environ.get("SOURCE_DATE_EPOCH")
    if value:
        try:
            return max(int(value), 315532800)
        except ValueError:
            raise BuildError(f"SOURCE_DATE_EPOCH={value!r} is not a number of seconds") from None
    return 315532800


def _package_files(root: Path = ROOT) -> List[Tuple[str, Path]]:
    """(path in the wheel, file): every .py file and py.typed under src/servegate, sorted."""
    src = root / "src"
    pkg = src / PACKAGE
    if not (pkg / "__init__.py").is_file():
        raise BuildError(f"{pkg}/__init__.py is missing")
    files = []
    for path in sorted(pkg.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and (path.suffix == ".py" or path.name == "py.typed"):
            files.append((path.relative_to(src).as_posix(), path))
    return files


def _sdist_files(root: Path = ROOT) -> List[Tuple[str, Path]]:
    files = []
    for name in SDIST_FILES:
        path = root / name
        if not path.is_file():
            raise BuildError(f"{path} is missing")
        files.append((name, path))
    for folder in SDIST_DIRS:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files.append((path.relative_to(root).as_posix(), path))
    return sorted(files)


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _wheel_file(generator_version: str) -> bytes:
    return (
        "Wheel-Version: 1.0\n"
        f"Generator: {GENERATOR} ({generator_version})\n"
        "Root-Is-Purelib: true\n"
        f"Tag: {TAG}\n"
    ).encode("utf-8")


def _dist_info_files(project: Mapping[str, Any], root: Path) -> Dict[str, bytes]:
    return {
        "METADATA": _metadata(project, root),
        "WHEEL": _wheel_file(str(project["version"])),
    }


def _write_wheel(wheel_directory: str, entries: Iterator[Tuple[str, bytes]], project: Mapping[str, Any]) -> str:
    name = f"{_dist_name(project)}-{project['version']}"
    dist_info = f"{name}.dist-info"
    filename = f"{name}-{TAG}.whl"
    stamp = time.gmtime(_epoch())[:6]
    records: List[str] = []
    out = Path(wheel_directory)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (filename + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:

        def add(arcname: str, data: bytes) -> None:
            info = zipfile.ZipInfo(arcname, date_time=stamp)
            info.external_attr = (0o100644 & 0xFFFF) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
            records.append(f"{arcname},{_record_hash(data)},{len(data)}")

        for arcname, data in entries:
            add(arcname, data)
        record_name = f"{dist_info}/RECORD"
        records.append(f"{record_name},,")
        info = zipfile.ZipInfo(record_name, date_time=stamp)
        info.external_attr = (0o100644 & 0xFFFF) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(info, ("\n".join(records) + "\n").encode("utf-8"))
    os.replace(tmp, out / filename)
    return filename


def _dist_info_entries(project: Mapping[str, Any], root: Path) -> Iterator[Tuple[str, bytes]]:
    dist_info = f"{_dist_name(project)}-{project['version']}.dist-info"
    for name, data in sorted(_dist_info_files(project, root).items()):
        yield f"{dist_info}/{name}", data


# ---------------------------------------------------------------------------------------------------------------
# PEP 517 hooks
# ---------------------------------------------------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings: Optional[Mapping[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Mapping[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Mapping[str, Any]] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: Optional[Mapping[str, Any]] = None
) -> str:
    project = _project()
    dist_info = f"{_dist_name(project)}-{project['version']}.dist-info"
    target = Path(metadata_directory) / dist_info
    target.mkdir(parents=True, exist_ok=True)
    for name, data in _dist_info_files(project, ROOT).items():
        (target / name).write_bytes(data)
    return dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(
    wheel_directory: str,
    config_settings: Optional[Mapping[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    project = _project()

    def entries() -> Iterator[Tuple[str, bytes]]:
        for arcname, path in _package_files(ROOT):
            yield arcname, path.read_bytes()
        yield from _dist_info_entries(project, ROOT)

    return _write_wheel(wheel_directory, entries(), project)


def build_editable(
    wheel_directory: str,
    config_settings: Optional[Mapping[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    """PEP 660: a wheel whose only content is a .pth file that puts this checkout's src/ on sys.path."""
    project = _project()
    _package_files(ROOT)  # the same checks as a real build

    def entries() -> Iterator[Tuple[str, bytes]]:
        yield f"__editable__.{_dist_name(project)}.pth", (str(ROOT / "src") + "\n").encode("utf-8")
        yield from _dist_info_entries(project, ROOT)

    return _write_wheel(wheel_directory, entries(), project)


def build_sdist(sdist_directory: str, config_settings: Optional[Mapping[str, Any]] = None) -> str:
    project = _project()
    base = f"{_dist_name(project)}-{project['version']}"
    filename = f"{base}.tar.gz"
    out = Path(sdist_directory)
    out.mkdir(parents=True, exist_ok=True)
    mtime = _epoch()
    files: List[Tuple[str, bytes]] = [(name, path.read_bytes()) for name, path in _sdist_files(ROOT)]
    files.append(("PKG-INFO", _metadata(project, ROOT)))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in sorted(files):
            info = tarfile.TarInfo(f"{base}/{name}")
            info.size = len(data)
            info.mtime = mtime
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tf.addfile(info, io.BytesIO(data))
    import gzip

    tmp = out / (filename + ".tmp")
    with open(tmp, "wb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=mtime) as gz:
        gz.write(raw.getvalue())
    os.replace(tmp, out / filename)
    return filename
