"""Capture: compile a problem with Inductor and open up what it generated.

    compiled.py        compile_problem and CompiledModel: the wrapper modules, every Triton kernel
                       (source, launch configuration, arguments, what it writes), the extern calls
    problem.py         problem files and their seeded inputs
    shapes.py          declared shapes (SHAPES) and the store's folder names
    swap.py            a candidate swapped into the live compiled model, and put back
    training.py        a training problem's step, its loss, backward graphs told apart
    variants.py        the one catalogue of named Inductor settings
    graph_rewrites.py  kernelopt's graph rewrites (rewrite_kernels.py: their Triton kernels)
    outputs.py         the outputs of a call, flattened
    floor.py           what one call or training step must move and compute at the least (its limit)

This file only re-exports.
"""

from __future__ import annotations

from .compiled import (
    RACE_ATTR,
    CompiledModel,
    KernelHandle,
    compile_problem,
    compile_semantics,
    describe_value,
    extern_calls,
    find_kernel_def,
    fingerprint,
    is_current,
    kernel_fingerprint,
    launch_config,
    launch_key,
    launch_signature,
    pointer_uses,
    read_kernel_source,
    signature_key,
    written_args,
)

__all__ = ["RACE_ATTR", "CompiledModel", "KernelHandle", "compile_problem", "compile_semantics", "describe_value",
           "extern_calls", "find_kernel_def", "fingerprint", "is_current", "kernel_fingerprint", "launch_config",
           "launch_key", "launch_signature", "pointer_uses", "read_kernel_source", "signature_key", "written_args"]
