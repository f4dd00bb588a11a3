"""Named Inductor compile settings: the one catalogue of them.

Two uses. The search backend compiles a problem under each (``agents/harvest.py``) and
offers the kernels that fit the model's own compile as candidates. ``kernelopt tune``
also tries each as the *model's* compile (``model.json``'s ``compile``): the whole model
compiled under it, judged against float64 with the default compile's own error as the
allowance and timed against the default compile. Such a setting may change more than a
kernel (GEMMs and convolutions as Triton templates with their epilogues fused, other
fusion), which no kernel swap can do.

A stored choice is a *name* from this catalogue, never a dict of options: ``model.json``
is read from the repository (a stranger's pull request may edit it), and Inductor's
options include compiler paths and custom passes. A name this version does not know is
refused (the gate's model item fails; production compiles with the defaults and warns).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CPU_VARIANTS", "HARVEST_VARIANTS", "LIBRARY_GEMMS", "MODEL_VARIANTS", "VARIANTS", "CompileVariant",
           "compiling", "inductor_patches", "needless", "persistent_up_to", "unknown_variant"]


@dataclass(frozen=True)
class CompileVariant:
    name: str
    mode: str | None  # torch.compile's mode (its Inductor options), None: default
    patches: dict[str, Any] = field(default_factory=dict)  # Inductor config on top of the mode's
    # Inner reductions with a static length up to this many elements are persistent (the row held
    # on chip and read once), where Inductor loops over rows longer than 1024. No Inductor option
    # sets that threshold: an InductorChoices handler does (:func:`persistent_up_to`).
    persistent_rows: int | None = None
    about: str = ""
    # Harvested by the search backend for drop-in kernels (a setting that changes kernels'
    # arguments, such as 2-D tiling, yields none that fit).
    harvest: bool = True
    # Differs from the compile without it only in how GEMMs and convolutions run: a model
    # that makes no extern (library) call compiles the same, so the model-level trial skips it.
    externs_only: bool = False
    # Compiled with kernelopt's graph rewrites (``capture/graph_rewrites.py``): patterns Inductor
    # splits into several kernels replaced by one kernel of this package's own.
    rewrites: bool = False

    @property
    def templates(self) -> bool:
        """Compiles GEMMs and convolutions as raced Triton templates (max-autotune's): a compile of minutes on a
        model with large GEMMs (a bf16 ViT block: 88 s, H100)."""
        return bool(self.mode and "max-autotune" in self.mode) and \
            self.patches.get("max_autotune_gemm_backends") != LIBRARY_GEMMS["max_autotune_gemm_backends"]

    @property
    def uncached(self) -> bool:
        """Compiled without the FX graph and autograd caches: a choices handler is in no cache key
        (torch 2.11), and a rewrite counts its matches (``rewrites_done``) only when it runs."""
        return self.persistent_rows is not None or self.rewrites


# GEMMs and convolutions as library (extern) calls only: no Triton template is compiled or raced.
LIBRARY_GEMMS = {"max_autotune_gemm_backends": "ATEN", "max_autotune_conv_backends": "ATEN"}

VARIANTS: dict[str, CompileVariant] = {v.name: v for v in (
    # Not harvested: max-autotune-extern's Triton kernels are the same, compiled without the
    # GEMM/convolution templates, whose fused epilogues leave kernels no default-compile kernel
    # matches, and whose compile took most of a GEMM problem's harvest (40 s on the H200).
    CompileVariant("max-autotune", "max-autotune-no-cudagraphs",
                   about="max-autotune's configuration search, Triton GEMM/convolution templates included",
                   harvest=False),
    CompileVariant("max-autotune-extern", "max-autotune-no-cudagraphs", dict(LIBRARY_GEMMS),
                   about="max-autotune's configuration search for Triton's kernels; GEMMs and convolutions stay "
                         "library (extern) calls (no Triton template compiled or raced)",
                   externs_only=True),
    # With the GEMM/convolution templates since 2026-12-03 (seventh session): on a bfloat16 conv +
    # group norm + SiLU problem the rewrites on max-autotune-extern ran at 0.858x of the default
    # compile, where max-autotune's template convolution made max-autotune 1.039x (H200).
    CompileVariant("max-autotune-rewrites", "max-autotune-no-cudagraphs", rewrites=True,
                   about="max-autotune, plus kernelopt's graph rewrites (a cumulative sum or product between two "
                         "flips of its axis, a group norm, a softmax or L1/L2 normalisation of rows wider than 128 KB: "
                         "one kernel each that reads its input once, where Inductor makes two or three passes; a "
                         "cross-entropy over rows of 16 KB or more, read once, with a backward that reads them once "
                         "more; without gradients, attention written out as torch's fused attention, key/value heads "
                         "repeated for fused attention read once per group of query heads instead, and a linear "
                         "layer's ReLU or tanh GELU in its GEMM's epilogue)",
                   harvest=False),
    # Since 2026-12-07: the rewrites with GEMMs and convolutions left to the libraries, a compile of seconds where
    # max-autotune-rewrites' GEMM templates take minutes (a bf16 ViT block: 88 s, H100), so that a run with
    # --run-budget-s still checks the rewrites (attention written out above all) when the templates' compiles
    # do not fit; max-autotune-rewrites stays for models whose template convolution is the win.
    CompileVariant("max-autotune-extern-rewrites", "max-autotune-no-cudagraphs", dict(LIBRARY_GEMMS), rewrites=True,
                   about="max-autotune-rewrites with GEMMs and convolutions left to the libraries (no Triton "
                         "template compiled or raced)",
                   externs_only=True, harvest=False),
    CompileVariant("coordinate-descent", None, {"coordinate_descent_tuning": True},
                   about="default compile, launch configurations refined by coordinate descent"),
    CompileVariant("looped-reductions", None, {"triton.persistent_reductions": False},
                   about="default compile, every reduction looped (never held on chip)"),
    # H200, 2026-12-02 (bench/variants_gpu.py, whose variants could then time each other's code:
    # docs/results-h200.md): frobenius_norm 1.121x and log_softmax_scale 1.018x over max-autotune;
    # harvested, so the cascade judges each kernel it gives. Without GEMM/convolution templates
    # since 2026-12-03 (with them its compile took 50 of a GEMM problem's 65 s of harvest).
    CompileVariant("persistent-rows", "max-autotune-no-cudagraphs", dict(LIBRARY_GEMMS), persistent_rows=8192,
                   about="max-autotune without GEMM/convolution templates, inner reductions up to 8192 elements "
                         "per row persistent"),
    CompileVariant("max-autotune-nd-tiling", "max-autotune-no-cudagraphs", {"triton.prefer_nd_tiling": True},
                   about="max-autotune, pointwise kernels tiled in 2-D (strided and transposed access)", harvest=False),
)}
# Interpreter mode (CPU): max-autotune benchmarks every configuration, which the
# interpreter makes minutes long; only the cheap ones run.
CPU_VARIANTS = ("looped-reductions",)
# What the search backend harvests on a GPU.
HARVEST_VARIANTS = tuple(name for name, v in VARIANTS.items() if v.harvest)
# The model-level compiles ``kernelopt tune`` tries on a GPU, in this order. Not persistent-rows
# and coordinate-descent: they change kernels, not the partition, so the harvest already offers
# their kernels one by one (and each compile costs GPU time: max-autotune took 6-11 s, max-autotune
# with 2-D tiling 16-18 s on the H200's GEMM/convolution problems, 2026-12-03; on a GEMM + softmax
# problem max-autotune's trial took 30 s, max-autotune-extern's 4 s, 2-D tiling's 20 s).
# max-autotune-extern first (since 2026-12-06): it compiles in seconds, where max-autotune's GEMM templates can
# take a run's whole --run-budget-s (an H100, a bf16 GPT-2 block's training step: max-autotune's trial took 243 s,
# and the kernel search never ran); on a model without extern calls it is skipped (``needless``).
MODEL_VARIANTS = ("max-autotune-extern", "max-autotune-extern-rewrites", "max-autotune", "max-autotune-rewrites",
                  "max-autotune-nd-tiling")


_SCAN = "tl.associative_scan"  # how Inductor's scan kernels combine (torch 2.11 and 2.13)
_CROSS_ENTROPY = "nll_loss"  # in the names of Inductor's cross-entropy kernels (``..._nll_loss_forward_0``)


def _attention(kernels: list[Any], externs: list[Any]) -> bool:
    """Whether the model may write attention out: a softmax kernel beside batched matrix products (the
    scores and the weighted sum of 4-D tensors are ``bmm`` calls)."""
    return any("softmax" in k.name for k in kernels) and any("bmm" in e.target for e in externs)


def _grouped_attention(kernels: list[Any], externs: list[Any]) -> bool:
    """Whether the model may repeat key/value heads for fused attention (grouped-query attention written with
    ``repeat_interleave`` or ``repeat_kv``): a fused attention call beside a kernel that copies an expanded tensor
    (``triton_poi_fused_clone_expand_...``)."""
    return any("scaled_dot_product" in e.target for e in externs) \
        and any("expand" in k.name and "clone" in k.name for k in kernels)


def _activation_beside_gemm(kernels: list[Any], externs: list[Any]) -> bool:
    """Whether a linear layer's ReLU or GELU may be a kernel of its own after a library GEMM (the rewrite puts it
    in the GEMM's epilogue): a kernel named after the activation beside an extern matrix product (a GELU written
    out, Hugging Face's ``gelu_new``, is named after its steps: ``..._add_mul_pow_tanh_view_2``). An activation
    fused with a norm or a convolution (a convnet's ``..._batch_norm_..._relu_3``, beside its classifier's
    ``addmm``) is not a linear layer's."""
    return any("mm" in e.target for e in externs) \
        and any(any(word in k.name for word in ("gelu", "relu", "tanh")) and "norm" not in k.name
                and "convolution" not in k.name for k in kernels)


def _row_reduction(name: str) -> bool:
    """Whether an Inductor kernel called ``name`` may be a softmax or an L1/L2 normalisation over rows
    (``triton_red_fused__softmax_0``, ``..._abs_div_sum_...``, ``..._linalg_vector_norm_...``). A batch or layer
    norm is neither (no rewrite reads them): a convnet's pooling kernel fused with its batch norm
    (``..._native_batch_norm_legit_no_training_max_pool2d_with_indices_mean_relu_7``) sent two rewrite trials
    through whole compiles that found nothing, and max-autotune, run after them, was cut by the budget (H100,
    2026-12-07: 0.976x of max-autotune at that shape)."""
    return name.startswith("triton_red") and any(word in name for word in ("softmax", "vector_norm", "sum"))


# A rewrite setting's check that rewrote nothing says so in these words (verify/compile_check.py); the compile step
# then skips the other rewrite settings at that shape (agents/compile_choice.py): they would find nothing either.
NOTHING_REWRITTEN = "kernelopt's graph rewrites found nothing to rewrite in this model"


def needless(name: str, kernels: list[Any], externs: list[Any]) -> str | None:
    """Why trying variant ``name`` on a model whose default compile has these kernels and extern
    calls (``KernelInfo``, ``ExternCallInfo``) would only repeat another compile (None: it may differ)."""
    variant = VARIANTS[name]
    if variant.externs_only and not externs:
        return "the model makes no extern (library) call, so it compiles as max-autotune does"
    if variant.rewrites and any(getattr(k, "training", None) for k in kernels) \
            and not any(_CROSS_ENTROPY in k.name for k in kernels):
        return ("a training step without a cross-entropy: of the graph rewrites only the cross-entropy's has a "
                "backward, the others decline where gradients are recorded (capture/graph_rewrites.py), "
                "so it compiles as max-autotune does")
    if variant.rewrites and not any(_SCAN in k.source or "group_norm" in k.name or _row_reduction(k.name)
                                    or _CROSS_ENTROPY in k.name for k in kernels) \
            and not _attention(kernels, externs) and not _grouped_attention(kernels, externs) \
            and not _activation_beside_gemm(kernels, externs) \
            and not any(op in e.target for e in externs for op in ("cumsum", "cumprod")):
        return ("the model has no scan (cumulative sum or product), no group norm, no softmax or norm over rows, "
                "no cross-entropy, no attention written out, no key/value heads repeated for fused attention and "
                "no ReLU or GELU kernel beside a library GEMM, the patterns the graph rewrites change")
    return None



def unknown_variant(name: str) -> str | None:
    """Why ``name`` cannot be used (None: it is in the catalogue)."""
    if name in VARIANTS:
        return None
    return f"unknown compile variant {name!r} (this version knows: {', '.join(VARIANTS)})"


def inductor_patches(name: str | None) -> dict[str, Any]:
    """The Inductor config patches of variant ``name`` (its mode's options and its own); {} for None."""
    if name is None:
        return {}
    variant = VARIANTS[name]
    patches: dict[str, Any] = {}
    if variant.mode:
        from torch._inductor import list_mode_options

        patches.update(list_mode_options(variant.mode))
    patches.update(variant.patches)
    if variant.rewrites:
        from .graph_rewrites import pre_grad_rewrite_pass, rewrite_pass

        patches["pre_grad_custom_pass"] = pre_grad_rewrite_pass()
        patches["post_grad_custom_pre_pass"] = rewrite_pass()
    if variant.uncached:
        # The kernel-level caches (Triton binaries, launch-configuration races) are keyed by the
        # kernel's source and stay on: with every cache off (force_disable_caches) the persistent-rows
        # compile took 77-94 s on the H200, 2026-12-03.
        patches["fx_graph_cache"] = False
        patches["fx_graph_remote_cache"] = False
    return patches


@contextlib.contextmanager
def compiling(name: str | None) -> Iterator[dict[str, Any]]:
    """While the block runs, Inductor compiles as variant ``name`` does (None: no change).

    Yields the config patches (also applied), for ``compile_fx(..., config_patches=)``
    callers. The choices handler is process-wide: compile one model at a time.
    """
    if name is None:
        yield {}
        return
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor.choices import InductorChoices
    from torch._inductor.virtualized import V

    variant = VARIANTS[name]
    patches = inductor_patches(name)
    with contextlib.ExitStack() as stack:
        stack.enter_context(inductor_config.patch(patches))
        if variant.uncached:
            stack.enter_context(functorch_config.patch(enable_autograd_cache=False))
        if variant.persistent_rows is not None:
            V.set_choices_handler(persistent_up_to(variant.persistent_rows))
            stack.callback(lambda: V.set_choices_handler(InductorChoices()))
        yield patches


def persistent_up_to(limit: int) -> Any:
    """Inductor's choices, except that an inner reduction of a static length up to ``limit`` is persistent."""
    import torch._inductor.config as inductor_config
    from torch._inductor.choices import InductorChoices
    from torch._inductor.runtime.hints import ReductionHint

    class PersistentRows(InductorChoices):
        @staticmethod
        def should_use_persistent_reduction(features: Any, cooperative_reduction: bool) -> bool:
            if InductorChoices.should_use_persistent_reduction(features, cooperative_reduction):
                return True
            if cooperative_reduction or not inductor_config.triton.persistent_reductions:
                return False
            numel = features.reduction_numel
            return (features.get_reduction_hint() == ReductionHint.INNER
                    and bool(getattr(numel, "is_number", False)) and int(numel) <= limit)

    return PersistentRows()
