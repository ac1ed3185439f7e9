"""A float64 shadow of a Triton kernel's run, and where the kernel first parted from it (issue #47).

When a call asks for it (`CallSettings.shadow64`, only while a failure is being explained), every float value the
kernel makes carries a float64 twin computed by the same operation on the operands' twins (shadow_ops.py): same
control flow (branches, loop bounds, masks and indices are the kernel's own values), loads read the same memory
(the twin of a loaded value is the value, exact in float64), and the twin of a stored value is compared, not
written. Programs run one at a time.

For each float operation, in the order the program runs them, `ShadowRun.follow` measures how far the kernel's
value parts from its twin (normwise: the largest difference over the block, relative to the block's largest
magnitude) and how much the operation grew the divergence its operands already carried, beyond what its own
rounding explains (a sum of n terms may add n units of rounding; `terms`). An operation that grows it by
`GROW` or more is a candidate: a subtraction of nearly equal values that carried rounding (one-pass variance), an
exp that underflows where float64 does not. At each store the stored values are compared with their twins.

A program's finding is its first candidate whose divergence is a fair share (1/`SHARE`) of the divergence of
its worst store, provided that store parted from its twin beyond rounding (`agrees`); a store that turned
non-finite where its twin stayed finite is explained by the first operation that did so from finite operands.
A program whose stores agree with their twins within rounding has no finding: a logic bug (a wrong index, a
dropped loop tail) is the same wrong code in float64, and the shadow says nothing of it.

Whatever the twins say, the run also notes the call's first operation that made a NaN or an infinity from finite
operands (`first_nonfinite`: a division by zero, a log of 0, an exp that overflows; 1/0 is inf in float64 too, so
no twin parts there), for the failures with non-finite outputs (backends/nonfinite_probe.py).

An underflow or a non-finite value from finite operands is a question of range: why was the operand so large or so
small? Its finding also names the lines its operands came from (`Origin`, followed back through the operations on
the finding's own line): for a running max that started at 0 instead of -inf, the exp of `x - m` underflows, and
its operand came from the `tl.maximum` that kept the 0.
"""

from __future__ import annotations

import linecache
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ml_dtypes
import msgspec
import numpy as np

from gpuemu_ci.triton_cpu import active, lowp, sites

if TYPE_CHECKING:
    from gpuemu_ci.triton_cpu.call import Launch

SHADOW = "_gpuemu_shadow"  # the attribute of an interpreter value that holds its twin (`Carried`)
ORIGIN = (
    "_gpuemu_origin"  # ... and of a loaded value, the line that loaded it (`sites.Frame`; it carries no twin)
)
MAX_ORIGINS = 4  # lines a finding names its operands came from (the earliest)
GROW = 64.0  # an operation is a candidate when it grows the divergence by this much beyond its own rounding
SHARE = 16.0  # ... and the finding when its divergence is at least 1/SHARE of its program's worst store's
AGREE_FP32_BITS = 14  # a store within 2^-14 of its twin (about 10 bits lost in fp32) agrees with it ...
AGREE_UNITS = 4.0  # ... or within 4 units of rounding of its own type, where that is wider (fp16, bf16, fp8)
MAX_CANDIDATES = 64  # candidates a program keeps (the earliest)
MAX_REPORTED = 256  # programs whose findings the report carries (those whose stores parted most)


class ShadowFinding(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where one program of a kernel first parted from its float64 shadow: the operation's line (`site`, as
    `kernel.py:50 (in _fwd)`) and source text, what happened (`kind`: "parted", "non_finite" or "underflow"),
    how much it grew the divergence its operands carried (`factor`), the divergence it reached, the kernel's
    value and the shadow's at the element that parted most; and the divergence of the program's worst store.
    For an underflow or a non-finite value, `origins`: the lines its operands came from, as `site` with source."""

    kernel: str
    program: tuple[int, int, int]
    pid: int
    site: str
    source: str
    kind: str
    factor: float
    divergence: float
    kernel_value: float
    shadow_value: float
    store_divergence: float
    origins: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line: "first parted from float64 at ln.py:50 (in _fwd) `var = ...`: ×3.1e+04 at program (3, 0, 0)
        (kernel 0.012, float64 1.0)"."""
        code = f" `{self.source}`" if self.source else ""
        where = f"at {self.site}{code}"
        values = f"kernel {self.kernel_value:.6g}, float64 {self.shadow_value:.6g}"
        made = " and at ".join(self.origins)
        came = f"; its operands came from the values made at {made}" if self.origins else ""
        if self.kind == "non_finite":
            what = f"{where}: finite operands gave {self.kernel_value:g} where float64 gives {self.shadow_value:.6g}"
            return f"first parted from float64 {what} at program {self.program}{came}"
        if self.kind == "underflow":
            what = f"{where}: underflowed to 0 where float64 gives {self.shadow_value:.6g}"
            return f"first parted from float64 {what} at program {self.program}{came}"
        return f"first parted from float64 {where}: ×{self.factor:.2g} at program {self.program} ({values})"


@dataclass(frozen=True)
class Origin:
    """The line that made a value, and the lines its operands came from (the first operations of other lines
    that fed it through operations on this one)."""

    line: sites.Frame | None
    sources: frozenset[sites.Frame] = frozenset()

    def of_operand(self, made_at: sites.Frame | None) -> frozenset[sites.Frame]:
        """What this operand brings to a value made at `made_at`: its own sources when it was made on that line
        too, else its line."""
        if self.line is None:
            return frozenset()
        return self.sources if self.line == made_at else frozenset({self.line})


@dataclass
class Carried:
    """What an interpreter value carries beside its data during a shadow run: its float64 twin, the normwise
    divergence of the data from it (inf where the data turned non-finite and the twin did not), and its origin."""

    values: np.ndarray
    divergence: float
    origin: Origin = field(default_factory=lambda: Origin(None))


def carried(handle: Any) -> Carried | None:
    """The twin a value carries (None: its data is its own twin, as a loaded value's)."""
    found = getattr(handle, SHADOW, None)
    return found if isinstance(found, Carried) else None


def origin(handle: Any) -> Origin:
    """Where a value was made: its twin's record, or a loaded value's line."""
    found = carried(handle)
    if found is not None:
        return found.origin
    loaded = getattr(handle, ORIGIN, None)
    return Origin(loaded) if isinstance(loaded, tuple) else Origin(None)


def twin(handle: Any) -> tuple[np.ndarray, float]:
    """A float value's twin and divergence (a value without one: its data, exact in float64)."""
    found = carried(handle)
    if found is not None:
        return found.values, found.divergence
    return np.asarray(handle.data).astype(np.float64), 0.0


def unit_roundoff(dtype: np.dtype) -> float:
    """Half the gap above 1.0 in `dtype`: the relative error of one rounding to nearest."""
    if lowp.is_lowp(dtype):
        return float(ml_dtypes.finfo(dtype).eps) / 2  # type: ignore[no-untyped-call]  # ml_dtypes is untyped
    return float(np.finfo(dtype).eps) / 2


def _tiny(data: np.ndarray) -> float:
    """The smallest normal magnitude of the type of `data`."""
    dtype = np.dtype(np.asarray(data).dtype)
    if lowp.is_lowp(dtype):
        return float(ml_dtypes.finfo(dtype).smallest_normal)  # type: ignore[no-untyped-call]
    return float(np.finfo(dtype).smallest_normal)


def _finite_operands(operands: list[Any], shape: tuple[int, ...]) -> np.ndarray:
    """Where every operand is finite: elementwise for operands of the result's shape (after broadcasting), over
    the whole block for the others (a reduction's, a dot's)."""
    finite = np.ones(shape, dtype=bool)
    for operand in operands:
        data = np.isfinite(np.asarray(operand.data).astype(np.float64))
        try:
            finite &= np.broadcast_to(data, shape)
        except ValueError:
            finite &= bool(data.all())
    return finite


def agrees(divergence: float, dtype: np.dtype) -> bool:
    """Whether a stored value that parts from its twin by `divergence` agrees with it within rounding."""
    return divergence <= max(2.0**-AGREE_FP32_BITS, AGREE_UNITS * unit_roundoff(dtype))


def divergence(kernel: np.ndarray, shadow: np.ndarray) -> tuple[float, int | None]:
    """The normwise divergence of `kernel` from `shadow` over the elements where both are finite (the largest
    difference over the larger of the two largest magnitudes), and the flat index of that largest difference."""
    both = np.isfinite(kernel) & np.isfinite(shadow)
    if not both.any():
        return 0.0, None
    with np.errstate(all="ignore"):
        apart = np.where(both, np.abs(kernel - shadow), 0.0)
    scale = max(float(np.max(np.abs(shadow[both]))), float(np.max(np.abs(kernel[both]))))
    if scale == 0.0:
        return 0.0, None
    at = int(np.argmax(apart))
    return float(apart.reshape(-1)[at]) / scale, at


@dataclass
class _Event:
    site: str
    source: str
    kind: str
    factor: float
    divergence: float
    kernel: float
    shadow: float
    origins: tuple[str, ...] = ()


@dataclass
class _Program:
    kernel: str
    grid: tuple[int, int, int]
    program: tuple[int, int, int]
    pid: int
    candidates: list[_Event] = field(default_factory=list)
    store: float = 0.0  # the divergence of its worst store
    store_dtype: np.dtype = field(default_factory=lambda: np.dtype(np.float32))


@dataclass
class ShadowRun:
    """The shadow run of one op call: the program running now, and the findings of those done."""

    # The (kernel, linear program id) followed, in order (CallSettings.shadow_programs); None: every program.
    follows: tuple[tuple[str, int], ...] | None = None
    alone_now: bool = False  # a followed program is running alone (launch.py)
    settled: bool = False  # a followed program had a finding: the programs left run as in any call
    depth: int = 0  # > 0 inside a shadowed operation: what it calls itself is not shadowed again
    programs: int = 0  # programs shadowed
    operations: int = 0  # float operations followed
    unshadowed: dict[str, int] = field(default_factory=dict)  # operations whose twin could not be computed
    # The call's first non-finite value made from finite operands: (its line, what to say of it).
    first_nonfinite: tuple[str, str] | None = None
    _key: tuple[int, int] = (-1, -1)
    _current: _Program | None = None
    _done: list[ShadowFinding] = field(default_factory=list)

    def watching(self, launch: Launch | None) -> bool:
        """Whether the shadow follows what runs now: a program run alone that it follows (a vectorised pass runs
        the programs it does not)."""
        if launch is None:
            return True
        return launch.batch is None and (self.alone_now or self.follows is None)

    def alone(self, launch: Launch, size: int) -> list[int]:
        """The programs of the launch (of `size`) to run alone, one at a time and in the order named, before the
        others: none once one had a finding, or where every program is followed anyway."""
        if self.follows is None or self.settled:
            return []
        return [pid for kernel, pid in self.follows if kernel == launch.kernel and 0 <= pid < size]

    def ran_alone(self) -> None:
        """A named program ran alone: it is done, and a finding of its settles the search."""
        before = len(self._done)
        self._close()
        self.settled = self.settled or len(self._done) > before

    def _program(self) -> _Program | None:
        """The program running now (its record is started when the launch moves on to it)."""
        call = active.call()
        launch = None if call is None else call.launch
        if call is None or launch is None:
            return None
        key = (call.launches, launch.pid)
        if key != self._key or self._current is None:
            self._close()
            self._key = key
            self._current = _Program(launch.kernel, launch.grid, launch.program, launch.pid)
            self.programs += 1
        return self._current

    def made(self, what: str, results: list[Any], operands: list[Any]) -> None:
        """The kernel's operation `what` (a builder method's name) made the float values `results` from
        `operands`: the call's first NaN or infinity made where every operand was finite is noted."""
        if self.first_nonfinite is not None:
            return
        for result in results:
            data = np.asarray(result.data)
            fresh = ~np.isfinite(data if data.dtype.kind == "f" else data.astype(np.float32))  # bf16, fp8
            if not fresh.any() or not (fresh & _finite_operands(operands, data.shape)).any():
                continue
            call = active.call()
            launch = None if call is None else call.launch
            if launch is None:
                return
            site = sites.site(launch)
            text = (
                "the first non-finite value the kernels made from finite operands: "
                f"`{what.removeprefix('create_')}` at {site}, program {launch.program} of `{launch.kernel}`"
            )
            self.first_nonfinite = (site, text)
            return

    def skipped(self, what: str) -> None:
        """An operation whose twin could not be computed: its result's data is its own twin."""
        self.unshadowed[what] = self.unshadowed.get(what, 0) + 1

    def follow(
        self, made: Any, values: np.ndarray, carried_in: float, terms: float, operands: list[Any]
    ) -> None:
        """The kernel made `made` (a float value) where the shadow made `values` from operands that carried
        `carried_in` divergence: `made` carries its twin, and the operation is measured."""
        kernel = np.asarray(made.data).astype(np.float64)
        if values.shape != kernel.shape:
            values = np.broadcast_to(values, kernel.shape) if values.size in (1, kernel.size) else kernel
        self.operations += 1
        parted, at = divergence(kernel, values)
        broke = np.isfinite(values) & ~np.isfinite(kernel)
        if broke.any():
            parted = math.inf
        frame = sites.user_frame()
        made_from = Origin(frame, frozenset().union(*(origin(o).of_operand(frame) for o in operands)))
        setattr(made, SHADOW, Carried(values, parted, made_from))
        program = self._program()
        if program is None or len(program.candidates) >= MAX_CANDIDATES or math.isinf(carried_in):
            return
        allowed = max(carried_in, terms * unit_roundoff(np.dtype(np.asarray(made.data).dtype)))
        if parted < GROW * allowed:
            return
        if math.isinf(parted):
            broke = broke & _finite_operands(operands, kernel.shape)
            if not broke.any():
                return  # non-finite operands: not this operation's doing
            at = int(np.argmax(broke.reshape(-1)))
            kind = "non_finite"
        else:
            kind = "parted"
            lost = (values != 0) & (kernel == 0)
            # Every value the shadow keeps was flushed to 0, below the type's range (not cancelled to 0).
            if (
                lost.any()
                and not kernel[values != 0].any()
                and (np.abs(values[lost]) < _tiny(made.data)).all()
            ):
                kind = "underflow"
                at = int(np.argmax(lost.reshape(-1)))
        at = 0 if at is None else at
        site, source = _said(frame) if frame is not None else ("an unknown line", "")
        origins: tuple[str, ...] = ()
        if kind in ("underflow", "non_finite"):
            ranked = sorted(made_from.sources, key=lambda line: (line[0], line[1]))[:MAX_ORIGINS]
            origins = tuple(f"{said} `{code}`" if code else said for said, code in map(_said, ranked))
        factor = parted / allowed if allowed > 0 else math.inf
        program.candidates.append(
            _Event(
                site,
                source,
                kind,
                factor,
                parted,
                float(kernel.reshape(-1)[at]),
                float(values.reshape(-1)[at]),
                origins,
            )
        )

    def loaded(self, value: Any) -> None:
        """A load made `value` (a float value, its own twin): its line, for the findings its operands feed."""
        setattr(value, ORIGIN, sites.user_frame())

    def stored(self, value: Any, mask: Any) -> None:
        """A store of `value` under `mask`: how far the stored values part from their twins."""
        if not lowp.is_float(np.asarray(value.data).dtype):
            return
        program = self._program()
        if program is None:
            return
        kernel = np.asarray(value.data).astype(np.float64)
        shadow, _ = twin(value)
        shadow = np.broadcast_to(shadow, kernel.shape)
        on = np.broadcast_to(np.asarray(mask.data, dtype=bool), kernel.shape) if mask is not None else None
        if on is not None:
            kernel, shadow = kernel[on], shadow[on]
        parted, _ = divergence(kernel, shadow)
        if (np.isfinite(shadow) & ~np.isfinite(kernel)).any():
            parted = math.inf
        if parted > program.store:
            program.store = parted
            program.store_dtype = np.dtype(np.asarray(value.data).dtype)

    def _close(self) -> None:
        """The program running until now is done: its finding, if its stores parted from their twins."""
        program, self._current = self._current, None
        if program is None or agrees(program.store, program.store_dtype):
            return
        found = self._first(program)
        if found is not None:
            self._done.append(
                ShadowFinding(
                    program.kernel, program.program, program.pid, found.site, found.source, found.kind,
                    found.factor, found.divergence, found.kernel, found.shadow, program.store, found.origins,
                )
            )  # fmt: skip

    @staticmethod
    def _first(program: _Program) -> _Event | None:
        if math.isinf(program.store):
            # The store turned non-finite where float64 did not: the first operation that did so from finite
            # operands, or that earlier lost the value's leading digits (a variance cancelled below 0, then sqrt).
            for event in program.candidates:
                if event.kind in ("non_finite", "underflow") or event.divergence * SHARE >= 1.0:
                    return event
        return next((e for e in program.candidates if e.divergence * SHARE >= program.store), None)

    def findings(self) -> tuple[ShadowFinding, ...]:
        """The programs' findings, those whose stores parted most first (at most MAX_REPORTED)."""
        self._close()
        ranked = sorted(self._done, key=lambda f: (-f.store_divergence, f.kernel, f.pid))
        return tuple(ranked[:MAX_REPORTED])


def _said(frame: sites.Frame) -> tuple[str, str]:
    """("kernel.py:50 (in _fwd)", its source text) of a frame of user code."""
    return sites.named(frame), linecache.getline(frame[0], frame[1]).strip()
