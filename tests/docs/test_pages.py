"""Every code block of README.md and of the documentation's pages (docs/**/*.md) runs as
written and prints what the page shows.

How a page shows what a block prints, and how this test compares it (below, "the README"
stands for any of these pages):

- A ``text`` block right after a ``python`` block (only prose between them, such as
  "prints (...):") is the block's whole standard output, line by line.  What varies from run
  to run or from machine to machine is normalised (``VARYING``: dates, pids, ports, paths,
  durations, sample counts, free disk space, a Dask worker's peak), and memory figures that
  depend on the machine (resident memory, compressed sizes: ``MACHINE_SIZES``) must be within
  a factor of ``TOLERANCE`` of the README's (a README figure of ``0 B`` there, such as swap,
  matches any).  Everything else is compared exactly; runs of spaces match any run of
  spaces, since a column widens with a wider figure.
- A ``print(...)`` line with a trailing comment: ``SHOWN`` maps each such line of the README
  to the regular expression that its output line must match in full (in the order of the
  block), or to None where the comment describes the output without showing it.  Every
  such README line must be listed there, so a changed example fails here until its
  expectation is updated with it.
- ``sh`` blocks: each ``oocarray ...`` line runs in a fresh directory holding small inputs
  under the names it reads (``CLI_INPUTS``), and must succeed (the README shows no output for
  them).  The first block's install commands are checked as text only.  ``oocarray demo``
  (1.5 GiB, half a minute on an idle 2-core machine) and ``oocarray bench`` (a benchmark)
  are not run here: tests/cli/test_cli_demo.py runs the demo at small sizes and
  tests/cli/test_cli_bench.py the bench command.

Every Python block runs as a script file (``python block.py``, so that processes it spawns
can import it) in a fresh interpreter and a fresh temporary directory.  A block that guards
its work with ``if __name__ == "__main__":`` is also imported the way a spawned worker
imports it (``__mp_main__``): that must neither write a file nor print anything.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from testkit import children

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# The README, then the site's pages (not those the build generates or copies in).
BUILT = {"_build", "generated", "notebooks", "jupyter_execute"}
PAGES = [README, *sorted(p for p in (ROOT / "docs").rglob("*.md") if not BUILT & set(p.parts))]
HANG_GUARD_S = 600  # a hang guard only: no block is expected to come near it

# What a README line shows that varies: (pattern in the README, pattern it stands for).
VARYING = [
    (r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"),  # a date
    (r"(?<=pid )\d+", r"\d+"),
    (r"(?<=127\.0\.0\.1:)\d+", r"\d+"),  # a port
    (r"(?<![\w.])/[^\s:]+", r"/[^\s:]+"),  # a path (temporary and spill directories)
    (r"\d+\.\d+ s\b", r"\d+\.\d+ s\b"),  # a duration
    (r"\d+(?= samples)", r"\d+"),
    (r"[\d.]+ [KMGT]?i?B(?= free)", r"[\d.]+ [KMGT]?i?B"),  # free disk space
    (r"\d+(?= MiB peak of)", r"\d+"),  # a Dask worker's peak: which blocks it ran
]
SIZE = r"[\d.]+ (?:B|KiB|MiB|GiB)"
# Sizes that depend on the machine (libraries, page cache, codec versions): where they are.
MACHINE_SIZES = [
    r"^Resident memory.*",  # every size on the line
    r"(?<=temporary array )" + SIZE,  # compressed bytes: the codec's version
    r"(?<=temporary arrays )" + SIZE,
    r"^ +" + SIZE + r"(?=  /)",  # a temporary array in the report's list
    r"(?<=peak resident )" + SIZE,
    r"(?<=anonymous \+ shared )" + SIZE,
]
TOLERANCE = 2.0  # a machine-dependent figure is within a factor of 2 of the README's

# Each README line that prints and ends in a comment: the pattern of its output line, or None
# where the comment describes rather than shows it.  (The compressed size of 8,000,000 int64
# ids, "~80 KB", depends on the zstd version: TOLERANCE applies to it.)
SHOWN: dict[str, str | None] = {
    "print(etl.stats().current_bytes)                 # exact bytes, as NumPy asked for them": (
        None
    ),
    "print(etl.debug_dump())                          # the subtree with bytes and counts per "
    "manager": None,
    "print([oc.location(p) for p in parts])          # 'ram' while the budget lasts, then "
    "'mmap'": r"\['ram'(, 'ram')*(, 'mmap')+\]",
    "print(ws.stats())                                  # size, learned size, cycles, pinned "
    "bytes, ...": r"WorkspaceStats\(name='train-step', size_bytes=\d+, learned_bytes=\d+, "
    r"cycles=100, .*pinned_bytes=\d+.*\)",
    "print(t[10:20].flags.writeable, oc.location(t.as_ndarray()))   # True 'mmap'": "True mmap",
    "print(h[3].sum(), h.codec)                    # the filter chain: 'gzip', 'shuffle+gzip', "
    "...": r"[\d.]+ gzip",
    "print(a.mean(axis=0)[:3])                      # a full scan in 4 MiB of chunks": None,
    "print(oc.location(ids), ids[123_456])           # 'zarr' 123456: the chunk comes back": (
        "zarr 123456"
    ),
    "print(s.compressed_bytes, s.compressed_disk_bytes)   # 64000000 and ~80 KB on disk": (
        r"64000000 (?P<about_80000>\d+)"
    ),
    "print(s.size_bytes > 4 * 2**20, s.memory.ram_bytes)   # True 0: nothing held between "
    "cycles": "True 0",
    "print(z[1000:1002, :3])                          # evaluates only these rows": None,
    "print(x.shape, x.chunks, x.codec)              # (276991, 64) (8192, 64) zstd+crc32c: 2 "
    "MiB chunks": r"\(276991, 64\) \(8192, 64\) zstd\+crc32c",
    "print(len(b))                                  # 98 batches per epoch": "98",
    "print(seen == len(x))                          # every row exactly once per epoch": "True",
    "print(sum(1 for _ in DataLoader(ds, batch_size=None, num_workers=2)))   # the last 8": "8",
    "print(Y.to_dask().sum(axis=0).compute())   # dask graphs too: workers read by path": None,
    "print(monitor.peak)  # the highest of each figure, and when resident memory peaked": None,
    "print(oc.who_holds(cache[0])[0])  # item 0 of a list, in global 'cache' of module "
    "'__main__'": r"item 0 of a list, in global 'cache' of module '__main__'",
}

# The inputs each `oocarray` command of the README reads, made small.
DATA = np.random.default_rng(0).standard_normal((4096, 64)).astype(np.float32)  # 1 MiB
CLI_INPUTS = {"data.zarr", "data.h5", "data.npy", "old.zarr"}
CLI_NOT_RUN = {"demo", "bench"}  # see the module's docstring


@dataclass(frozen=True)
class Block:
    page: Path
    lang: str
    code: str
    section: str
    number: int  # its place among the section's blocks, from 1
    shown: str | None  # the text block that shows a python block's output

    @property
    def name(self) -> str:
        where = self.page.relative_to(ROOT).with_suffix("").as_posix()
        slug = re.sub(r"[^a-z0-9]+", "-", self.section.lower()).strip("-")
        return f"{where}:{slug}-{self.number}"


def _blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    blocks: list[Block] = []
    section = ""
    i = 0
    between_prose = True  # only prose since the last python block
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            section = line.lstrip("#").strip()
            between_prose = False
        elif line.startswith("```"):
            lang = line[3:].strip()
            i += 1
            body = []
            while not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            code = "\n".join(body) + "\n"
            last = blocks[-1] if blocks else None
            if lang == "text" and last is not None and last.lang == "python" and between_prose:
                blocks[-1] = Block(page, last.lang, last.code, last.section, last.number, code)
            else:
                number = 1 + sum(b.section == section for b in blocks)
                blocks.append(Block(page, lang, code, section, number, None))
            between_prose = lang == "python"
        i += 1
    return blocks


BLOCKS = [block for page in PAGES for block in _blocks(page)]
PYTHON = [b for b in BLOCKS if b.lang == "python"]
SHELL = [b for b in BLOCKS if b.lang == "sh"]


def _run_script(code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as a script file in ``cwd`` (``args`` go to the interpreter first)."""
    script = cwd / "readme_block.py"
    script.write_text(code)
    return children.run([*args, script.name], cwd=cwd, timeout=HANG_GUARD_S)


def _size(text: str) -> float:
    number, unit = text.split()
    return float(number) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]


def _within_tolerance(shown: float, got: float) -> bool:
    return shown == 0 or shown / TOLERANCE <= got <= shown * TOLERANCE


def _line_pattern(shown: str) -> tuple[re.Pattern[str], list[float]]:
    """A README output line as a pattern: varying parts normalised, machine-dependent sizes
    captured in order (with their README values) for the tolerance check."""
    spans: list[tuple[int, int, str, float | None]] = []
    for pattern in MACHINE_SIZES:
        for match in re.finditer(pattern, shown):
            for size in re.finditer(SIZE, match.group()):
                start = match.start() + size.start()
                spans.append((start, start + len(size.group()), f"({SIZE})", _size(size.group())))
    for pattern, stands_for in VARYING:
        for match in re.finditer(pattern, shown):
            if not any(s < match.end() and match.start() < e for s, e, _, _ in spans):
                spans.append((match.start(), match.end(), stands_for, None))
    spans.sort()
    regex, values, at = "", [], 0
    for start, end, stands_for, value in spans:
        if start < at:
            continue
        regex += _literal(shown[at:start]) + stands_for
        if value is not None:
            values.append(value)
        at = end
    regex += _literal(shown[at:])
    return re.compile(regex), values


def _literal(text: str) -> str:
    return " +".join(re.escape(part) for part in re.split(r" +", text))


def _compare_with_text(shown: str, stdout: str) -> None:
    want, got = shown.rstrip("\n").splitlines(), stdout.rstrip("\n").splitlines()
    assert len(got) == len(want), f"the README shows {len(want)} lines, it printed:\n{stdout}"
    for readme_line, line in zip(want, got, strict=True):
        pattern, values = _line_pattern(readme_line)
        match = pattern.fullmatch(line)
        assert match is not None, f"README: {readme_line!r}\nprinted: {line!r}"
        for value, text in zip(values, match.groups(), strict=True):
            assert _within_tolerance(value, _size(text)), (
                f"{text} is not within a factor of {TOLERANCE} of the README's figure in\n"
                f"README: {readme_line!r}\nprinted: {line!r}"
            )


def _commented_prints(code: str) -> list[str]:
    return [
        line.strip()
        for line in code.splitlines()
        if "print(" in line and re.search(r"\)\s+#", line)
    ]


def _compare_with_comments(block: Block, stdout: str) -> None:
    lines = stdout.splitlines()
    at = 0
    for source in _commented_prints(block.code):
        pattern = SHOWN[source]
        if pattern is None:
            continue
        while at < len(lines) and not re.fullmatch(pattern, lines[at]):
            at += 1
        assert at < len(lines), f"no line printed matches {pattern!r} ({source}):\n{stdout}"
        match = re.fullmatch(pattern, lines[at])
        assert match is not None
        for name, text in match.groupdict().items():
            shown = float(name.split("_")[1])
            assert _within_tolerance(shown, float(text)), f"{text} is not about {shown:.0f}"
        at += 1


def test_readme_starts_with_the_two_commands() -> None:
    first = README.read_text().split("```")[1].strip().splitlines()
    assert first[0] == "sh"
    assert first[1] == "pip install . && oocarray demo"
    assert first[2] == 'pip install -e ".[test]" && pytest'


def test_every_commented_print_has_its_expectation() -> None:
    commented = {line for b in PYTHON for line in _commented_prints(b.code)}
    missing = sorted(commented - SHOWN.keys())
    assert not missing, f"page lines not in tests/docs/test_pages.py SHOWN: {missing}"
    gone = sorted(SHOWN.keys() - commented)
    assert not gone, f"SHOWN lists lines no page has any more: {gone}"


@pytest.mark.parametrize("block", PYTHON, ids=[b.name for b in PYTHON])
def test_python_block_prints_what_the_page_shows(block: Block, tmp_path: Path) -> None:
    result = _run_script(block.code, tmp_path)
    assert result.returncode == 0, result.stderr[-5000:]
    if block.shown is not None:
        _compare_with_text(block.shown, result.stdout)
    _compare_with_comments(block, result.stdout)


GUARDED = [b for b in PYTHON if 'if __name__ == "__main__":' in b.code]


@pytest.mark.parametrize("block", GUARDED, ids=[b.name for b in GUARDED])
def test_scripts_are_spawn_safe(block: Block, tmp_path: Path) -> None:
    # What multiprocessing's spawn (and so dask's nannies) runs in each new process.
    importer = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__mp_main__')"
    result = _run_script(block.code, tmp_path, "-c", importer)
    assert result.returncode == 0, result.stderr[-5000:]
    assert result.stdout == "", "importing the script printed: work outside the main guard"
    made = sorted(
        p.name for p in tmp_path.iterdir() if p.name not in ("readme_block.py", "__pycache__")
    )
    assert made == [], f"importing the script made {made}: work outside the main guard"


def _cli_commands() -> list[list[str]]:
    commands = []
    for block in SHELL:
        for line in block.code.splitlines():
            words = line.split("#", 1)[0].split()
            if words[:1] == ["oocarray"] and words[1] not in CLI_NOT_RUN:
                commands.append(words[1:])
    return commands


def _make_input(name: str, where: Path) -> None:
    import h5py

    import oocarray as oc

    path = where / name
    if name.endswith(".npy"):
        np.save(path, DATA)
    elif name.endswith(".h5"):
        with h5py.File(path, "w") as f:
            f.create_dataset("a/b", data=DATA)
    else:
        oc.create(path, DATA.shape, DATA.dtype, chunks=(1024, 64))[...] = DATA


CLI = _cli_commands()


@pytest.mark.parametrize("args", CLI, ids=[" ".join(a) for a in CLI])
def test_cli_command_runs(args: list[str], tmp_path: Path) -> None:
    source = args[1]  # what the command reads; convert's second name is what it writes
    assert source in CLI_INPUTS, f"make a small {source} for the README's command {args}"
    _make_input(source, tmp_path)
    result = children.run(["-m", "oocarray", *args], cwd=tmp_path, timeout=HANG_GUARD_S)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "the command printed nothing"
