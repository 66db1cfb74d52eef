"""The compile flags a kernel file is built with (-I, -D, -include, --std), given on the command line or read from a
CMake `compile_commands.json` (`-p BUILD_DIR`, as clang tools and HIPIFY take it)."""
from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from toolchain.files import InputError, read_input

STD_DEFAULT = "c++17"


class FlagsError(Exception):
    """A compile database that cannot be read, or a file it does not list; str() is the one line to print."""


@dataclass(frozen=True)
class CompileFlags:
    """Include folders, macros, forced includes and the language standard of one translation unit."""
    include_dirs: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()          # NAME or NAME=VALUE
    includes: tuple[str, ...] = ()         # -include FILE, in order
    std: str | None = None                 # c++17, c++20...

    def clang_args(self) -> list[str]:
        """Arguments for the libclang parse (the standard defaults to C++17, nvcc's)."""
        args = [f"-std={self.std or STD_DEFAULT}"]
        args += [f"-I{d}" for d in self.include_dirs] + [f"-D{d}" for d in self.defines]
        for inc in self.includes:
            args += ["-include", inc]
        return args

    def defines_map(self) -> dict[str, str | None]:
        """-D values as the emulator takes them."""
        return {d.split("=", 1)[0]: (d.split("=", 1)[1] if "=" in d else None) for d in self.defines}

    def forced_prefix(self, filename: str) -> str:
        """Source text that includes the -include files ahead of a file and then restores its line numbers."""
        if not self.includes:
            return ""
        name = filename.replace("\\", "/").replace('"', "")
        return "".join(f'#include "{os.path.abspath(i)}"\n' for i in self.includes) + f'#line 1 "{name}"\n'

    def merged(self, other: CompileFlags) -> CompileFlags:
        """These flags, then `other`'s (the command line's -I/-D come after a database's)."""
        return CompileFlags(self.include_dirs + other.include_dirs, self.defines + other.defines,
                            self.includes + other.includes, other.std or self.std)


@dataclass
class CompileDatabase:
    """compile_commands.json of a build folder: the flags of each source file, by absolute path."""
    path: Path
    entries: dict[str, CompileFlags] = field(default_factory=dict)

    def flags_for(self, file: str) -> CompileFlags:
        """The flags the build compiles `file` with; FlagsError when the database does not list it."""
        key = os.path.realpath(file)
        if key not in self.entries:
            raise FlagsError(f"{file}: error: not listed in {self.path} (compile it in the build, or pass -I/-D)")
        return self.entries[key]


def load_database(build_dir: str) -> CompileDatabase:
    """Read BUILD_DIR/compile_commands.json (a file path is taken as the database itself)."""
    path = Path(build_dir)
    if path.is_dir():
        path = path / "compile_commands.json"
    try:
        raw = json.loads(read_input(path, "compile database", 256 * 2**20))
    except InputError as e:
        raise FlagsError(str(e)) from None
    except UnicodeDecodeError:
        raise FlagsError(f"{path}:1:1: error: not a compile database: not UTF-8 text") from None
    except OSError as e:
        raise FlagsError(f"{path}: error: cannot read the compile database: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise FlagsError(f"{path}:{e.lineno}:{e.colno}: error: not a compile database: {e.msg}") from None
    if not isinstance(raw, list):
        raise FlagsError(f"{path}:1:1: error: not a compile database: expected a JSON list of commands")
    db = CompileDatabase(path)
    for n, entry in enumerate(raw):
        if not isinstance(entry, dict) or "file" not in entry:
            continue
        directory, file = entry.get("directory", str(path.parent)), entry["file"]
        args, command = entry.get("arguments"), entry.get("command", "")
        bad = ("'file' is not a string" if not isinstance(file, str) or not file else
               "'directory' is not a string" if not isinstance(directory, str) else
               "'arguments' is not a list of strings" if args is not None and not (
                   isinstance(args, list) and all(isinstance(a, str) for a in args)) else
               "'command' is not a string" if not isinstance(command, str) else None)
        if bad is None and args is None:
            try:
                args = shlex.split(command)
            except ValueError as e:
                bad = f"'command' cannot be split into arguments ({e})"
        if bad:
            raise FlagsError(f"{path}: error: entry {n}: {bad}; not a compile database CMake writes")
        src = file if os.path.isabs(file) else os.path.join(directory, file)
        db.entries[os.path.realpath(src)] = flags_from_args(args or [], directory)
    return db


def flags_from_args(args: list[str], directory: str) -> CompileFlags:
    """-I/-isystem/-iquote, -D, -include and -std of a compiler command line (nvcc's spellings included)."""
    incs: list[str] = []
    defs: list[str] = []
    forced: list[str] = []
    std: str | None = None
    it = iter(args[1:])
    for a in it:
        for flag, bucket in (("-I", incs), ("-isystem", incs), ("-iquote", incs), ("-D", defs),
                             ("--include-path", incs), ("--define-macro", defs)):
            if a == flag:
                bucket.append(next(it, ""))
                break
            if a.startswith(flag + "=") and flag.startswith("--"):
                bucket.append(a.split("=", 1)[1])
                break
            if a.startswith(flag) and not flag.startswith("--") and len(a) > len(flag) and flag in ("-I", "-D"):
                bucket.append(a[len(flag):])
                break
        else:
            if a in ("-include", "--pre-include"):
                forced.append(next(it, ""))
            elif a.startswith("-std="):
                std = a.split("=", 1)[1]
            elif a == "-std":
                std = next(it, None)
    absolute = tuple(d if os.path.isabs(d) else os.path.normpath(os.path.join(directory, d)) for d in incs)
    forced_abs = tuple(f if os.path.isabs(f) else os.path.normpath(os.path.join(directory, f)) for f in forced)
    return CompileFlags(absolute, tuple(defs), forced_abs, std)


def resolve(file: str, flags: CompileFlags, build_dir: str | None) -> CompileFlags:
    """The flags for `file`: its compile database entry (when -p is given), then the command line's."""
    if build_dir is None:
        return flags
    return load_database(build_dir).flags_for(file).merged(flags)


