"""What a timing says it ran on: the CPU by its model name and, since a VM's name often hides the
generation ("AMD EPYC"), its family, model and microarchitecture from /proc/cpuinfo."""

from __future__ import annotations

import platform

from sweeps.timing.devices import cpu_model


def cpuinfo(vendor: str, family: int, model: int, name: str) -> str:
    """/proc/cpuinfo's text for two logical CPUs (the second block must not be read)."""
    block = (
        "processor\t: {n}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
        "model name\t: {name}\nflags\t\t: fpu vme\n\n"
    )
    first = block.format(n=0, vendor=vendor, family=family, model=model, name=name)
    return first + block.format(n=1, vendor=vendor, family=family + 1, model=0, name="other")


def test_the_cpu_is_named_with_its_generation_where_its_family_and_model_tell():
    assert cpu_model(cpuinfo("AuthenticAMD", 25, 1, "AMD EPYC")) == (
        "AMD EPYC [Zen 3; family 25, model 1]"
    )
    assert cpu_model(cpuinfo("AuthenticAMD", 25, 17, "AMD EPYC")) == (
        "AMD EPYC [Zen 4; family 25, model 17]"
    )
    assert cpu_model(cpuinfo("AuthenticAMD", 23, 49, "AMD EPYC 7B12")) == (
        "AMD EPYC 7B12 [Zen 2; family 23, model 49]"
    )
    assert cpu_model(cpuinfo("GenuineIntel", 6, 143, "Intel(R) Xeon(R) Processor")) == (
        "Intel(R) Xeon(R) Processor [Sapphire Rapids; family 6, model 143]"
    )


def test_a_cpu_of_unknown_generation_keeps_its_family_and_model_and_a_bare_name_stays_bare():
    assert cpu_model(cpuinfo("GenuineIntel", 6, 200, "Intel(R) Xeon(R) Processor")) == (
        "Intel(R) Xeon(R) Processor [family 6, model 200]"
    )
    # an ARM host's cpuinfo has no x86 family: the name alone
    assert cpu_model("processor\t: 0\nmodel name\t: Neoverse-V2\nCPU part\t: 0xd4f\n") == (
        "Neoverse-V2"
    )
    # no model name at all (macOS, or an ARM kernel that gives none): Python's platform module
    assert cpu_model("") == (platform.processor() or platform.machine() or "unknown CPU")
