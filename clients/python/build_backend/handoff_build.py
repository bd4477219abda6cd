"""A PEP 517 build backend for this package, with the standard library only.

pip builds a package in an isolated environment into which it first
installs the backend's requirements; offline, with no registry, that fails
for setuptools (and a machine's own setuptools without `wheel` cannot build
a wheel either). This backend needs nothing: it reads pyproject.toml's
[project] table and zips src/ into a pure-Python wheel. It builds only this
package's layout: src/<one package>/ with its py.typed.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import io
import os
import re
import sys
import tarfile
import time
import zipfile
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATOR = "handoff_build 1"


# -- pyproject.toml


def _toml(text: str) -> Dict[str, Any]:
    """The tables of a TOML file. tomllib where there is one (3.11+);
    otherwise the subset this pyproject.toml uses: tables, and keys whose
    values are strings, booleans, integers, or arrays of strings, on one
    line or several."""
    if sys.version_info < (3, 11):
        return _toml_subset(text)
    tomllib = importlib.import_module("tomllib")
    doc: Dict[str, Any] = tomllib.loads(text)
    return doc


_STRING = r'"(?:[^"\\]|\\.)*"'


def _toml_subset(text: str) -> Dict[str, Any]:
    doc: Dict[str, Any] = {}
    table = doc
    lines = iter(text.splitlines())
    for raw in lines:
        line = _strip_comment(raw).strip()
        if not line:
            continue
        m = re.fullmatch(r"\[([A-Za-z0-9_.-]+)\]", line)
        if m:
            table = doc
            for part in m.group(1).split("."):
                table = table.setdefault(part, {})
            continue
        m = re.fullmatch(r'([A-Za-z0-9_-]+|"[^"]*")\s*=\s*(.*)', line)
        if not m:
            raise ValueError(f"pyproject.toml: cannot read line {raw!r} (the backend reads a subset of TOML)")
        key, value = m.group(1).strip('"'), m.group(2)
        if value.startswith("[") and not _closed(value):
            for more in lines:
                value += " " + _strip_comment(more).strip()
                if _closed(value):
                    break
        table[key] = _value(value)
    return doc


def _strip_comment(line: str) -> str:
    out, in_str, esc = [], False, False
    for c in line:
        if in_str:
            esc = c == "\\" and not esc
            if c == '"' and not esc:
                in_str = False
        elif c == '"':
            in_str = True
        elif c == "#":
            break
        out.append(c)
    return "".join(out)


def _closed(value: str) -> bool:
    return value.rstrip().endswith("]") and value.count("[") == value.count("]")


def _value(v: str) -> Any:
    v = v.strip()
    if re.fullmatch(_STRING, v):
        return _unquote(v)
    if v in ("true", "false"):
        return v == "true"
    if re.fullmatch(r"-?[0-9]+", v):
        return int(v)
    if v.startswith("[") and v.endswith("]"):
        inner = v[1:-1].strip().rstrip(",").strip()
        if not inner:
            return []
        items = re.findall(_STRING, inner)
        if re.sub(r"\s*,\s*", "", re.sub(_STRING, "", inner)).strip():
            raise ValueError(f"pyproject.toml: cannot read {v!r}: the backend reads arrays of strings only")
        return [_unquote(s) for s in items]
    raise ValueError(f"pyproject.toml: cannot read value {v!r} (the backend reads a subset of TOML)")


def _unquote(s: str) -> str:
    return s[1:-1].encode("utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")


def _project() -> Dict[str, Any]:
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        project = _toml(f.read()).get("project")
    if not isinstance(project, dict) or not project.get("name") or not project.get("version"):
        raise ValueError("pyproject.toml: [project] needs a name and a version")
    if project.get("dependencies"):
        raise ValueError("pyproject.toml: the in-tree backend builds packages without dependencies")
    return project


# -- metadata


def _dist_name(project: Dict[str, Any]) -> str:
    return re.sub(r"[-_.]+", "_", project["name"]).lower()


def _metadata(project: Dict[str, Any]) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
    ]
    if project.get("description"):
        lines.append(f"Summary: {project['description']}")
    if project.get("keywords"):
        lines.append("Keywords: " + ",".join(project["keywords"]))
    if project.get("requires-python"):
        lines.append(f"Requires-Python: {project['requires-python']}")
    for c in project.get("classifiers", []):
        lines.append(f"Classifier: {c}")
    body = ""
    readme = project.get("readme")
    if isinstance(readme, str):
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            body = f.read()
        lines.append("Description-Content-Type: text/markdown" if readme.endswith(".md") else "Description-Content-Type: text/plain")
    return "\n".join(lines) + "\n\n" + body


def _wheel_file() -> str:
    return f"Wheel-Version: 1.0\nGenerator: {GENERATOR}\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _package_files() -> List[Tuple[str, str]]:
    """(path in the wheel, path on disk) of every file of src/'s packages,
    caches left out."""
    src = os.path.join(ROOT, "src")
    out = []
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(dirpath, name)
            out.append((os.path.relpath(full, src).replace(os.sep, "/"), full))
    if not out:
        raise ValueError("src/ holds no package")
    return out


# -- the wheel


class _Wheel:
    def __init__(self, path: str) -> None:
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.record: List[str] = []

    def add(self, name: str, data: bytes) -> None:
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append(f"{name},sha256={digest},{len(data)}")

    def close(self, dist_info: str) -> None:
        name = f"{dist_info}/RECORD"
        self.record.append(f"{name},,")
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        self.zip.writestr(info, "\n".join(self.record) + "\n")
        self.zip.close()


def _dist_info_files(project: Dict[str, Any]) -> Dict[str, bytes]:
    tops = sorted({p.split("/")[0] for p, _ in _package_files() if "/" in p})
    return {
        "METADATA": _metadata(project).encode("utf-8"),
        "WHEEL": _wheel_file().encode(),
        "top_level.txt": ("\n".join(tops) + "\n").encode(),
    }


def _build(wheel_directory: str, editable: bool) -> str:
    project = _project()
    name, version = _dist_name(project), project["version"]
    filename = f"{name}-{version}-py3-none-any.whl"
    dist_info = f"{name}-{version}.dist-info"
    w = _Wheel(os.path.join(wheel_directory, filename))
    try:
        if editable:
            # PEP 660: a .pth file that puts src/ on sys.path.
            w.add(f"__editable__.{name}-{version}.pth", (os.path.join(ROOT, "src") + "\n").encode())
        else:
            for arc, full in _package_files():
                with open(full, "rb") as f:
                    w.add(arc, f.read())
        for fname, data in _dist_info_files(project).items():
            w.add(f"{dist_info}/{fname}", data)
    finally:
        w.close(dist_info)
    return filename


# -- PEP 517 and PEP 660 hooks


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    project = _project()
    dist_info = f"{_dist_name(project)}-{project['version']}.dist-info"
    os.makedirs(os.path.join(metadata_directory, dist_info), exist_ok=True)
    for fname, data in _dist_info_files(project).items():
        with open(os.path.join(metadata_directory, dist_info, fname), "wb") as f:
            f.write(data)
    return dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None, metadata_directory: Optional[str] = None) -> str:
    return _build(wheel_directory, editable=False)


def build_editable(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None, metadata_directory: Optional[str] = None) -> str:
    return _build(wheel_directory, editable=True)


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    project = _project()
    base = f"{_dist_name(project)}-{project['version']}"
    filename = f"{base}.tar.gz"
    files = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")), ("build_backend/handoff_build.py", os.path.abspath(__file__))]
    readme = project.get("readme")
    if isinstance(readme, str):
        files.append((readme, os.path.join(ROOT, readme)))
    files += [("src/" + arc, full) for arc, full in _package_files()]
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(f"{base}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))
            tar.addfile(info, io.BytesIO(data))

        add("PKG-INFO", _metadata(project).encode("utf-8"))
        for arc, full in files:
            with open(full, "rb") as f:
                add(arc, f.read())
    return filename
