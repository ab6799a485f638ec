"""Every entry of gapscope.catalog, walked through every layer that names it: a new category,
verdict or format without its handling fails here, not in a user's run (docs/architecture.md,
"Adding a category, a verdict, a format")."""

from __future__ import annotations

import re

import numpy as np
import pytest
from paths import ROOT, TRACES

from gapscope import catalog


@pytest.mark.parametrize("cat", catalog.CATEGORIES, ids=lambda c: c.name)
def test_every_layer_handles_every_category(cat):
    from gapscope.analysis.attribution import IdleCategory
    from gapscope.analysis.tables import CATEGORY_COLUMNS
    from gapscope.plots.style import CATEGORY_COLORS
    from gapscope.regression.metrics import metric_for
    from gapscope.render.perfetto import CATEGORY_CNAMES
    from gapscope.schema import CATEGORIES

    i = catalog.CATEGORY_NAMES.index(cat.name)
    assert IdleCategory(i).label == cat.name  # attribution numbers it so
    assert CATEGORIES[i] == cat.name  # the schema check reads it
    assert CATEGORY_COLUMNS[i] == f"gap_{cat.name}_ns"  # the per-gap tables
    metric = metric_for(cat.name)  # compare can gate it, with words
    assert (metric.kind, metric.field, metric.label, metric.worse_means) == ("category", cat.name, cat.label,
                                                                             cat.worse_means)
    assert re.fullmatch(r"#[0-9A-F]{6}", CATEGORY_COLORS[cat.name])  # the figures draw it
    assert CATEGORY_CNAMES[cat.name] == cat.perfetto  # the Perfetto export names it
    assert cat.by_graph in ("removes", "shrinks", "keeps") and cat.cause and cat.meaning and cat.remedy
    assert cat.name in catalog.READINGS or cat.name in catalog.REMOVED_BY_GRAPHS  # its verdict, or the bound ones


def test_the_why_idle_table_and_the_perfetto_export_show_every_category(analyzed):
    from gapscope.render import sections

    idle = sections.idle(analyzed("torch_decode"))
    headers = [c.header for c in idle.columns]
    assert [h for h in headers if h in catalog.CATEGORY_NAMES] == list(catalog.CATEGORY_NAMES)
    assert len({c.colour for c in catalog.CATEGORIES}) == len(catalog.CATEGORIES)  # told apart in figures


@pytest.mark.parametrize("v", catalog.VERDICTS, ids=lambda v: v.code)
def test_every_verdict_is_ranked_read_and_documented(v):
    from gapscope.analysis.verdicts import VERDICTS
    from gapscope.regression.metrics import VERDICT_RANK

    assert v.code in VERDICTS and VERDICT_RANK[v.code] == v.rank and 0 <= v.rank <= 3
    assert catalog.READINGS[v.code] == v.reading and catalog.PLAIN_READINGS[v.code]
    table = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8").split("### Verdicts", 1)[1].split("\n## ", 1)[0]
    assert f"`{v.code}`" in table  # metrics.md's table lists it


def test_the_verdict_rules_are_tried_in_the_catalogs_order():
    """The evaluator decides a row by the first matching rule: a row matching every rule's
    condition at once reads the catalog's first (no GPU span)."""
    from gapscope.analysis.verdicts import column_verdicts

    codes, _ = column_verdicts({"gap_fraction": np.array([np.nan]), "kernels": np.array([0.0])}, 1)
    assert codes[0] == catalog.VERDICTS[0].code == "no_work"


@pytest.mark.parametrize("fmt", catalog.FORMATS, ids=lambda f: f.name)
def test_every_format_has_a_reader_words_a_tracer_and_a_shipped_trace(fmt):
    from gapscope.cache import RESULT_FORMATS
    from gapscope.inputs import resolve
    from gapscope.render.sections import FORMAT_WORDS
    from gapscope.trace.handle import READERS

    assert callable(READERS[fmt.name]) and FORMAT_WORDS[fmt.name] == fmt.words
    assert fmt.tracer in catalog.TRACERS
    assert (fmt.name in RESULT_FORMATS) == fmt.result_cache
    shipped = {"nsys-sqlite": "torch_decode_small.sqlite", "nsys-parquet": "torch_decode_small_parquet",
               "nsys-arrow": "torch_decode_small_arrow", "nsys-rep": "torch_decode_small.nsys-rep",
               "kineto": "torch_decode_small.pt.trace.json.gz"}
    found = resolve(TRACES / shipped[fmt.name])  # inputs recognises it by its bytes
    assert (found.kind, found.format) == ("trace", fmt.name)


def test_the_id_layout():
    gid = (1234 << 24) | 77
    assert (catalog.process_of(gid), catalog.thread_of(gid), catalog.pid_of(gid)) == (1234, 77, 1234)
    assert catalog.global_id(1234, 77) == gid
    ids = np.array([gid, (5 << 24) | 3], dtype=np.int64)
    assert catalog.process_of(ids).tolist() == [1234, 5] and catalog.thread_of(ids).tolist() == [77, 3]


def test_the_gpu_calibration_falls_back_to_a_default():
    assert catalog.graph_costs("NVIDIA H200").turnaround_ns == 260.0
    assert catalog.graph_costs(None) == catalog.graph_costs("AMD Instinct MI300X") == catalog.GPU_GRAPH_COSTS[-1][1]


@pytest.mark.parametrize("name, library", [
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0", "cuDNN"),
    ("nchwToNhwcKernel", "cuDNN"),
    ("triton_red_fused__to_copy_add_embedding_mean_mul_pow_rsqrt_0", "Triton"),
    ("triton_tem_fused_mm_0", "Triton"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "NCCL"),
    ("flash_fwd_kernel", "FlashAttention"),
    ("nvjet_sm90_tst_64x8_64x16_4x2_h_bz_TNT", "cuBLAS"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "cuBLAS"),
    ("gemv2T_kernel_val", "cuBLAS"),
    ("Kernel2", catalog.OTHER_KERNELS),
    ("vectorized_elementwise_kernel", catalog.OTHER_KERNELS),
])
def test_a_kernels_library_is_the_first_whose_mark_its_name_holds(name, library):
    """The kernel names of the shipped traces' one-off stalls (and a few of each library), by
    hand: a name's library is the first of KERNEL_LIBRARIES whose mark it holds, any case."""
    assert catalog.kernel_library(name) == library
