"""sweeps/tpu_preflight.py: the accelerator type's topology, one compilation per distinct run
shape, the table, and the refusal of runs that do not fit."""

import importlib.util
import types

import pytest

from configs import alibi_tiny
from configs.errors import ConfigError
from sweeps import tpu_preflight

GIB = 2 ** 30


@pytest.mark.parametrize("accelerator,chips_per_run,topology", [
    ("v4-8", 0, "v4:2x2x1"), ("v4-32", 0, "v4:2x2x4"), ("v5litepod-16", 0, "v5e:4x4"),
    ("v5litepod-16", 4, "v5e:2x2"), ("v5p-8", 0, "v5p:2x2x1"), ("v6e-8", 0, "v6e:2x4"),
    ("v5e-1", 0, "v5e:1x1"), ("v6e-16", 2, "v6e:1x2")])
def test_accelerator_types_map_to_topologies(accelerator, chips_per_run, topology):
  assert tpu_preflight.topology_name(accelerator, chips_per_run) == topology


@pytest.mark.parametrize("accelerator,message", [
    ("v3-8", "v2 and v3 are not described"), ("v5litepod-12", "12 chips is not a power of two"),
    ("tpu-8", "the compile check knows")])
def test_types_it_cannot_describe_are_refused(accelerator, message):
  with pytest.raises(ConfigError, match=message):
    tpu_preflight.topology_name(accelerator)


def small_run(name: str, **fields):
  c = alibi_tiny.get_config()
  c.model.num_layers, c.data.train_len, c.eval.length_multipliers = 1, 64, (1.0, 2.0)
  for path, value in fields.items():
    node = c
    *keys, leaf = path.split(".")
    for key in keys:
      node = node[key]
    node[leaf] = value
  return types.SimpleNamespace(name=name, config=c)


def test_runs_of_one_shape_share_a_compilation_and_fields_that_change_it_do_not():
  a, b = small_run("a", **{"train.learning_rate": 1e-3}), small_run("b")
  c = small_run("c", **{"data.train_len": 128})
  assert tpu_preflight.shape_key(a.config) == tpu_preflight.shape_key(b.config)
  assert tpu_preflight.shape_key(a.config) != tpu_preflight.shape_key(c.config)


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="libtpu is not installed: "
                    "no TPU compiler on this host")
def test_each_shape_is_compiled_once_for_the_slice_and_tabled():
  runs = [small_run("a", **{"train.learning_rate": 1e-3}), small_run("b")]
  checks = tpu_preflight.check_shapes(runs, "v5e:2x2")
  assert len(checks) == 1 and checks[0].runs == ("a", "b") and checks[0].fits
  report = checks[0].report
  assert report["devices"] == 4 and report["eval"]["length"] == 128
  table = tpu_preflight.table(checks, "v5e:2x2")
  assert table[3].startswith("| a (+1) | ") and "| yes |" in table[3]
  tpu_preflight.refuse_unfit(checks, "v5e:2x2")  # fits: nothing raised


def fake_check(total_gib: float, error: str = "") -> tpu_preflight.ShapeCheck:
  memory = {"total": int(total_gib * GIB), "argument": GIB, "temporary": int(total_gib * GIB) - GIB}
  train = {"memory": memory, "fits": total_gib <= 16 and not error, "error": error,
           "mosaic_kernels": 0, "compile_s": 1.0, "estimate": {"step_s": 0.1, "mfu": 0.5}}
  return tpu_preflight.ShapeCheck(("big", "big2"), {"hbm_per_chip_bytes": 16 * GIB,
                                                    "train": train})


def test_runs_that_do_not_fit_are_refused_with_their_numbers():
  with pytest.raises(ConfigError, match=r"1 run shape\(s\) do not fit or do not compile for "
                     r"v5e:4x4: big, big2: the train step needs 20.00 GiB per chip of 16"):
    tpu_preflight.refuse_unfit([fake_check(20.0)], "v5e:4x4")
  refused = fake_check(22.44, error="RESOURCE_EXHAUSTED: Ran out of memory on HBM")
  with pytest.raises(ConfigError, match="the train step needs over 22.44 GiB per chip of 16"):
    tpu_preflight.refuse_unfit([refused], "v5e:4x4")
  assert "refused by the TPU compiler" in tpu_preflight.table([refused], "v5e:4x4")[3]
  failed = tpu_preflight.ShapeCheck(("x",), None, "error: data.train_len must be ...")
  with pytest.raises(ConfigError, match="x: error: data.train_len"):
    tpu_preflight.refuse_unfit([failed], "v5e:4x4")
