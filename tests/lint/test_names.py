"""Kernel identity: demangling, hash normalisation, `entries` selection."""

from __future__ import annotations

import shutil

import pytest

from gpuemu_ci.errors import ConfigError, ExitCode
from gpuemu_ci.lint.names import demangle, kernel_names, normalise_mangled, select_entries

ANON_A = "_ZN44_GLOBAL__N__92a91f80_11_internal_cu_d589cb606k_anonEPf"
ANON_B = "_ZN44_GLOBAL__N__b8575349_11_internal_cu_d589cb606k_anonEPf"  # same file, other directory
STATIC_RDC = "__nv_static_33__b8575349_11_internal_cu_d589cb60__Z8k_staticPf"
ANON_RDC = "__nv_static_33__b8575349_11_internal_cu_d589cb60_" + ANON_B  # -rdc form of ANON_B
TEMPL = [
    "_ZN3ops3addEPfPKf",
    "_Z12uses_globalsPf",
    "add_c",
    "_Z3addPiPKii",
    "_Z5scaleIdLi2EEvPT_S0_",
    "_Z5scaleIfLi4EEvPT_S0_",
]

demanglers = [pytest.param(shutil.which("c++filt"), id="c++filt"), pytest.param(None, id="libstdc++")]


def test_anonymous_namespace_hash_is_path_independent() -> None:
    assert normalise_mangled(ANON_A) == normalise_mangled(ANON_B) != ANON_A
    assert normalise_mangled(ANON_RDC) == normalise_mangled(ANON_A)
    assert normalise_mangled(STATIC_RDC) == "_Z8k_staticPf"


@pytest.mark.parametrize("cxxfilt", demanglers)
def test_demangled_names(cxxfilt: str | None) -> None:
    names = kernel_names([ANON_A, ANON_RDC, STATIC_RDC, *TEMPL], cxxfilt)
    assert names[ANON_A].demangled == names[ANON_RDC].demangled == "(anonymous namespace)::k_anon(float*)"
    assert names[STATIC_RDC].demangled == "k_static(float*)"
    assert names["_ZN3ops3addEPfPKf"].demangled == "ops::add(float*, float const*)"
    assert names["_Z5scaleIfLi4EEvPT_S0_"].demangled == "void scale<float, 4>(float*, float)"
    assert names["_Z5scaleIfLi4EEvPT_S0_"].qualified == "scale<float, 4>"
    assert names["_Z5scaleIfLi4EEvPT_S0_"].base == "scale"
    assert names["add_c"].demangled == "add_c"
    assert names[ANON_A].base == "k_anon"


def test_demangle_without_any_demangler_keeps_names() -> None:
    assert demangle(["add_c"], None) == {"add_c": "add_c"}


def _templ():
    return list(kernel_names(TEMPL, shutil.which("c++filt")).values())


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        ("ops::add", "_ZN3ops3addEPfPKf"),
        ("add(int*, int const*, int)", "_Z3addPiPKii"),
        ("_Z3addPiPKii", "_Z3addPiPKii"),
        ("scale<float,4>", "_Z5scaleIfLi4EEvPT_S0_"),
        ("add_c", "add_c"),
        ("uses_globals", "_Z12uses_globalsPf"),
    ],
)
def test_entry_selection(wanted: str, expected: str) -> None:
    (chosen,) = select_entries(_templ(), [wanted], kernel="templ", source="templ.cu")
    assert chosen.raw == expected


def test_ambiguous_overload_is_a_config_error_listing_candidates() -> None:
    with pytest.raises(ConfigError) as info:
        select_entries(_templ(), ["add"], kernel="templ", source="kernels/templ.cu")
    msg = info.value.diagnostics()
    assert info.value.exit_code == ExitCode.USAGE
    assert "entry 'add' is ambiguous in kernels/templ.cu" in msg
    assert "add(int*, int const*, int) [_Z3addPiPKii]" in msg
    assert "ops::add(float*, float const*) [_ZN3ops3addEPfPKf]" in msg
    assert "add_c" not in msg


def test_ambiguous_template_base_name() -> None:
    with pytest.raises(ConfigError, match="matches 2 kernels"):
        select_entries(_templ(), ["scale"], kernel="templ", source="templ.cu")


def test_unknown_entry_lists_what_exists() -> None:
    with pytest.raises(ConfigError, match=r"entry 'mul' is not a kernel in templ.cu; it has: .*ops::add"):
        select_entries(_templ(), ["mul"], kernel="templ", source="templ.cu")
