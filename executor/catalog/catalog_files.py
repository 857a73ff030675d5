"""The warehouse's own files -- database folders, external tables' registrations, views -- on a
local disk or in an S3 bucket (``isolde --warehouse s3a://bucket/wh``).

The catalog is a folder tree: a database is a folder, a managed table a folder with a
``_delta_log``, an external table a ``<name>.location.json`` pointer, a view a ``<name>.view.json``.
``LocalFolder`` keeps those on disk with ``os`` (symbolic links recognised: the catalog never
follows a name out of the warehouse). ``S3Folder`` keeps them as objects: S3 has no folders, so
a database holds a marker object (``.isolde-folder``) from its creation on, a pointer or a view
is one PUT (atomic: a reader sees the old or the new body), and a folder is removed by deleting
every key under its prefix. S3 has no links: ``islink`` is False, ``realpath`` the path itself.
"""

from __future__ import annotations

import json
import os
import shutil

from ..log import table_files

FOLDER_MARKER = ".isolde-folder"


class LocalFolder:
    remote = False

    join = staticmethod(os.path.join)
    isdir = staticmethod(os.path.isdir)
    isfile = staticmethod(os.path.isfile)
    lexists = staticmethod(os.path.lexists)
    islink = staticmethod(os.path.islink)
    realpath = staticmethod(os.path.realpath)
    listdir = staticmethod(os.listdir)
    remove = staticmethod(os.remove)
    unlink = staticmethod(os.unlink)

    @staticmethod
    def absolute(path: str) -> str:
        return os.path.abspath(os.path.expanduser(path))

    @staticmethod
    def makedirs(path: str, exist_ok: bool = False) -> None:
        os.makedirs(path, exist_ok=exist_ok)

    @staticmethod
    def rmtree(path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)  # (rmtree unlinks the links it meets, never follows them)

    @staticmethod
    def read_json(path: str):
        with open(path) as fh:
            return json.load(fh)

    @staticmethod
    def write_json(path: str, body, indent=None) -> None:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            json.dump(body, fh, indent=indent)
        os.replace(tmp, path)  # atomic: another session sees the old or the new body, never half


class S3Folder:
    """The same verbs on S3 keys (through pyarrow's S3 file system, ``table_files.S3Files``)."""

    remote = True

    def __init__(self, root: str):
        self._files = table_files.files_for(root)

    join = staticmethod(table_files.join)
    absolute = staticmethod(table_files.absolute)

    @staticmethod
    def islink(path: str) -> bool:
        return False

    @staticmethod
    def realpath(path: str) -> str:
        return table_files.normpath(path)

    def listdir(self, path: str) -> list[str]:
        names = self._files.names(path)
        if not names and not self._files.exists(path):
            raise FileNotFoundError(path)
        return names

    def isdir(self, path: str) -> bool:
        return bool(self._files.names(path))

    def isfile(self, path: str) -> bool:
        return self._files.exists(path) and not self.isdir(path)

    def lexists(self, path: str) -> bool:
        return self._files.exists(path) or self.isdir(path)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        if self.isdir(path) and not exist_ok:
            raise FileExistsError(path)
        self._files.write_bytes(self.join(path, FOLDER_MARKER), b"")

    def remove(self, path: str) -> None:
        if not self._files.exists(path):
            raise FileNotFoundError(path)
        self._files.delete(path)

    unlink = remove

    def rmtree(self, path: str) -> None:
        self._files.delete(path)

    def read_json(self, path: str):
        return json.loads(self._files.read_bytes(path))

    def write_json(self, path: str, body, indent=None) -> None:
        self._files.write_bytes(path, json.dumps(body, indent=indent).encode())  # one PUT: atomic


def folder_for(warehouse: str):
    return S3Folder(warehouse) if table_files.is_remote(warehouse) else LocalFolder()
