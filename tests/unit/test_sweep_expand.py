"""A sweep's points from the YAML's `sweep:` section and `-o` axes (sweep.expand):
their order, names, values and configs, and the errors that name the point (no Ray,
no files read but the YAML)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import ConfigError
from sweep.expand import expand_sweep, point_names

BASE = """\
name: sw
workdir: {root}
data_dir: {data}
ingest:
  sources:
    - path: corpus/*.txt
"""


@pytest.fixture
def write_config(tmp_path: Path):
    """write_config(extra YAML) -> the path of a config with that appended."""
    def write(extra: str = "") -> Path:
        path = tmp_path / "sweep.yaml"
        path.write_text(BASE.format(root=tmp_path / "root", data=tmp_path / "data") + extra)
        return path

    return write


GRID_2X2 = """\
sweep:
  grid:
    pretrain.model.hidden_size: [32, 64]
    pretrain.lr: [1.0e-3, 3.0e-3]
"""


def names(sweep) -> list[str]:
    return [point.name for point in sweep.points]


def test_a_grid_is_every_combination_with_the_last_axis_varying_fastest(write_config):
    sweep = expand_sweep(write_config(GRID_2X2))
    assert names(sweep) == ["hidden_size-32_lr-0.001", "hidden_size-32_lr-0.003",
                            "hidden_size-64_lr-0.001", "hidden_size-64_lr-0.003"]
    assert [p.overrides for p in sweep.points] == [
        {"pretrain.model.hidden_size": h, "pretrain.lr": lr} for h in (32, 64) for lr in (0.001, 0.003)]
    assert [(p.config.pretrain.model.hidden_size, p.config.pretrain.lr) for p in sweep.points] == [
        (32, 0.001), (32, 0.003), (64, 0.001), (64, 0.003)]
    assert sweep.name == "sw" and sweep.max_concurrent is None


def test_listed_points_are_each_crossed_with_the_grid(write_config):
    sweep = expand_sweep(write_config("""\
sweep:
  grid:
    pretrain.lr: [1.0e-3, 3.0e-3]
  points:
    - {pretrain.max_steps: 100}
    - {pretrain.max_steps: 400, dataset.seq_len: 256}
  max_concurrent: 3
"""))
    # A key set by only some points is part of their names only.
    assert names(sweep) == ["max_steps-100_lr-0.001", "max_steps-100_lr-0.003",
                            "max_steps-400_lr-0.001_seq_len-256", "max_steps-400_lr-0.003_seq_len-256"]
    assert [(p.config.pretrain.max_steps, p.config.dataset.seq_len) for p in sweep.points] == [
        (100, 128), (100, 128), (400, 256), (400, 256)]
    assert sweep.max_concurrent == 3


def test_an_o_axis_replaces_the_yaml_axis_of_its_key_and_plain_o_applies_to_every_point(write_config):
    sweep = expand_sweep(write_config(GRID_2X2), ["pretrain.lr=[0.01,0.02,0.03]", "pretrain.max_steps=7"])
    assert len(sweep.points) == 6
    assert [p.config.pretrain.lr for p in sweep.points] == [0.01, 0.02, 0.03] * 2
    assert {p.config.pretrain.max_steps for p in sweep.points} == {7}
    assert all("pretrain.max_steps" not in p.overrides for p in sweep.points)
    assert all("pretrain.max_steps=7" in p.cli_overrides for p in sweep.points)


def test_a_plain_o_of_a_key_the_yaml_varies_fixes_it_for_every_point(write_config):
    sweep = expand_sweep(write_config(GRID_2X2), ["pretrain.lr=0.01"])
    assert names(sweep) == ["hidden_size-32", "hidden_size-64"]
    assert [p.config.pretrain.lr for p in sweep.points] == [0.01, 0.01]


def test_o_axes_alone_make_a_sweep_in_the_order_given(write_config):
    sweep = expand_sweep(write_config(), ["pretrain.lr=[1e-3,3e-3]", "seed=[0,1]"])
    assert names(sweep) == ["lr-1e-3_seed-0", "lr-1e-3_seed-1", "lr-3e-3_seed-0", "lr-3e-3_seed-1"]


def test_a_list_valued_key_takes_one_list_for_all_points_or_a_list_of_lists_as_an_axis(write_config):
    config = write_config(GRID_2X2)
    plain = expand_sweep(config, ["finetune.tasks=[sst2,cola]"])
    assert len(plain.points) == 4
    assert all(p.config.finetune.tasks == ["sst2", "cola"] for p in plain.points)
    assert all("finetune.tasks" not in p.overrides for p in plain.points)

    axis = expand_sweep(config, ["finetune.tasks=[[sst2],[cola]]", "pretrain.lr=[1e-3]",
                                 "pretrain.model.hidden_size=[64]"])
    assert names(axis) == ["tasks-sst2", "tasks-cola"]
    assert [p.config.finetune.tasks for p in axis.points] == [["sst2"], ["cola"]]
    assert [p.overrides["finetune.tasks"] for p in axis.points] == [["sst2"], ["cola"]]

    # An empty list is one (empty) value for every point, never an empty axis.
    assert all(p.config.tracking.wandb.tags == [] for p in expand_sweep(config, ["tracking.wandb.tags=[]"]).points)
    with pytest.raises(ConfigError, match=r"finetune\.tasks.*list at least one task") as error:
        expand_sweep(config, ["finetune.tasks=[]"])
    assert "axis" not in str(error.value)


def test_values_are_named_as_written_and_recorded_as_the_config_validates_them(write_config):
    # YAML reads 1e-3 (no dot) as the string "1e-3"; the config holds the float 0.001.
    sweep = expand_sweep(write_config("sweep:\n  grid:\n    pretrain.lr: [1e-3, 3e-3]\n"))
    assert names(sweep) == ["lr-1e-3", "lr-3e-3"]
    assert [p.overrides for p in sweep.points] == [{"pretrain.lr": 0.001}, {"pretrain.lr": 0.003}]
    assert [p.config.pretrain.lr for p in sweep.points] == [0.001, 0.003]
    assert 'pretrain.lr="1e-3"' in sweep.points[0].cli_overrides


def test_names_use_the_full_key_when_two_keys_end_alike(write_config):
    sweep = expand_sweep(write_config(), ["pretrain.lr=[1e-3]", "finetune.lr=[1e-4,2e-4]"])
    # pretrain.lr takes one value: it is not part of the names, so finetune.lr is just "lr".
    assert names(sweep) == ["lr-1e-4", "lr-2e-4"]
    sweep = expand_sweep(write_config(), ["pretrain.lr=[1e-3,3e-3]", "finetune.lr=[1e-4]",
                                          "finetune.epochs=[1,2]"])
    assert names(sweep)[:2] == ["lr-1e-3_epochs-1", "lr-1e-3_epochs-2"]
    sweep = expand_sweep(write_config(), ["pretrain.lr=[0.001,0.003]", "finetune.lr=[1e-4,2e-4]"])
    assert names(sweep) == ["pretrain.lr-0.001_finetune.lr-1e-4", "pretrain.lr-0.001_finetune.lr-2e-4",
                            "pretrain.lr-0.003_finetune.lr-1e-4", "pretrain.lr-0.003_finetune.lr-2e-4"]


def test_names_are_unique_and_safe_as_folder_names(write_config):
    sweep = expand_sweep(write_config(), ['tracking.wandb.tags=[["a b"],["a/b"],[x]]'])
    assert names(sweep) == ["tags-a-b", "tags-a-b_1", "tags-x"]
    assert point_names([{"k": "../up"}, {"k": "a\\b:c*"}]) == ["k-..-up", "k-a-b-c"]
    # Points that differ in nothing are numbered.
    assert point_names([{"k": 1}, {"k": 1}]) == ["point0", "point1"]


def test_each_point_is_a_whole_experiment_under_the_sweep_root(write_config, tmp_path):
    sweep = expand_sweep(write_config(GRID_2X2))
    root = tmp_path / "root"
    assert sweep.root == root and sweep.store == root / "store"
    for point in sweep.points:
        assert point.config.name == f"sw-{point.name}"
        assert point.config.resolved_workdir == root / point.name
        assert point.config.resolved_store == root / "store"
        assert point.config.sweep is None
        assert point.config.tracking.wandb.group == "sw"


def test_a_wandb_group_the_user_chose_is_kept(write_config):
    in_yaml = expand_sweep(write_config("tracking:\n  wandb: {group: mine}\n" + GRID_2X2))
    assert {p.config.tracking.wandb.group for p in in_yaml.points} == {"mine"}
    with_o = expand_sweep(write_config(GRID_2X2), ["tracking.wandb.group=theirs"])
    assert {p.config.tracking.wandb.group for p in with_o.points} == {"theirs"}
    as_axis = expand_sweep(write_config(), ["tracking.wandb.group=[a,b]"])
    assert [p.config.tracking.wandb.group for p in as_axis.points] == ["a", "b"]


@pytest.mark.parametrize("overrides, message", [
    (["pretrain.lrr=[1,2]"], r"sweep point .*pretrain\.lrr=1.*unknown key 'pretrain\.lrr'; did you mean 'pretrain\.lr'\?"),
    (["pretrain.lr=[0.1,-1]"], r"sweep point pretrain\.lr=-1: .*'pretrain\.lr': Input should be greater than 0"),
    (["pretrain.model.hidden_size=[32,abc]"],
     r"sweep point pretrain\.model\.hidden_size=abc: .*valid integer"),
    (["pretrain.lr=[]"], r"-o pretrain\.lr=\[\]: an axis needs at least one value"),
    (["name=[a,b]"], r"'name' cannot vary in a sweep"),
    (["workdir=[a,b]"], r"'workdir' cannot vary in a sweep"),
    (["store=[a,b]"], r"'store' cannot vary in a sweep"),
    (["sweep.max_concurrent=[1,2]"], r"'sweep\.max_concurrent' cannot vary in a sweep"),
])
def test_o_mistakes_name_the_point_or_the_flag(write_config, overrides, message):
    with pytest.raises(ConfigError, match=message):
        expand_sweep(write_config(), overrides)


@pytest.mark.parametrize("section, message", [
    ("sweep:\n  grid:\n    pretrain.lrr: [1, 2]\n",
     r"sweep point pretrain\.lrr=1: .*unknown key 'pretrain\.lrr'; did you mean 'pretrain\.lr'\?"),
    ("sweep:\n  points:\n    - {pretrain.lr: 0.001}\n    - {pretrain.lr: -1}\n",
     r"sweep point pretrain\.lr=-1: .*greater than 0"),
    ("sweep:\n  grid:\n    pretrain.lr: []\n", r"sweep\.grid.*axis 'pretrain\.lr' has no values"),
    ("sweep:\n  grid:\n    workdir: [a, b]\n", r"sweep\.grid.*'workdir' cannot vary in a sweep"),
    ("sweep:\n  points:\n    - {store: /elsewhere}\n", r"sweep\.points.*'store' cannot vary in a sweep"),
    ("sweep:\n  grid:\n    name: [a, b]\n", r"'name' cannot vary in a sweep"),
    ("sweep:\n  grid:\n    sweep.grid: [1]\n", r"'sweep\.grid' cannot vary in a sweep"),
    ("sweep:\n  grid: {}\n", r"nothing to sweep"),
])
def test_yaml_mistakes_name_the_point_or_the_line(write_config, section, message):
    with pytest.raises(ConfigError, match=message):
        expand_sweep(write_config(section))


def test_nothing_to_sweep_says_how_to_make_one(write_config):
    with pytest.raises(ConfigError, match=r"nothing to sweep: add a `sweep:` section.*-o key=\[v1,v2\]"):
        expand_sweep(write_config(), ["pretrain.lr=0.002"])
    with pytest.raises(ConfigError, match="nothing to sweep"):
        expand_sweep(write_config(GRID_2X2), ["sweep="])  # the section switched off


def test_an_object_store_root_puts_every_point_and_the_store_under_the_url(write_config, tmp_path, monkeypatch):
    from storage.mirror import mirror_dir

    monkeypatch.setenv("PRETRAIN_MIRROR", str(tmp_path / "mirror"))
    url = "s3://bucket/sweeps/sw"
    sweep = expand_sweep(write_config(GRID_2X2), [f"workdir={url}/"])
    assert sweep.where == sweep.root_url == url  # as the config holds it: no trailing slash
    assert sweep.root == mirror_dir(url)  # sweep.json, logs and the summary are staged here
    for point in sweep.points:
        assert point.config.workdir == f"{url}/{point.name}"
        assert point.config.store_url == f"{url}/store"  # one shared store, in the bucket
    assert sweep.location("sweep.json") == f"{url}/sweep.json"


def test_a_bucket_store_with_a_folder_root_is_refused_naming_the_fix(write_config):
    with pytest.raises(ConfigError, match=r"store is s3://bucket/x but workdir is a folder.*-o workdir=s3://bucket/x"):
        expand_sweep(write_config(GRID_2X2), ["store=s3://bucket/x"])


# --- names, merged mappings, identical points, the size limit ------------------------

MODEL = "pretrain:\n  model: {family: gpt, num_layers: 2, hidden_size: 64, num_heads: 2}\n"


def test_an_axis_over_lists_of_sources_names_each_point_by_what_was_written(write_config):
    books = [[{"path": f"corpus/gutenberg/book-{i}.txt"}] for i in range(3)]
    many = [{"path": f"corpus/gutenberg/a-long-folder-name/book-{i}.txt", "format": "text"} for i in range(4)]
    axes = [f"ingest.sources={[*books, many]}", "seed=[0,1]"]
    sweep = expand_sweep(write_config(), axes)
    # The values as written (validated, every source would spell out 7 defaults).
    assert names(sweep)[:2] == ["sources-path-corpus-gutenberg-book-0.txt_seed-0",
                                "sources-path-corpus-gutenberg-book-0.txt_seed-1"]
    assert sweep.points[0].overrides == {"ingest.sources": books[0], "seed": 0}
    # A long value: its start, and a hash of all of it, so that two differ and a rerun
    # agrees; the other axes still show.
    long_name = names(sweep)[6]
    assert long_name.startswith("sources-path-corpus-gutenberg-a-") and long_name.endswith("_seed-0")
    assert len(long_name) <= 80
    assert long_name == names(expand_sweep(write_config(), axes))[6]
    fewer = expand_sweep(write_config(), [f"ingest.sources={[*books, many[:3]]}", "seed=[0,1]"])
    assert long_name != names(fewer)[6]
    assert [p.config.ingest.sources[0].path for p in sweep.points[::2]] == [
        "corpus/gutenberg/book-0.txt", "corpus/gutenberg/book-1.txt", "corpus/gutenberg/book-2.txt",
        "corpus/gutenberg/a-long-folder-name/book-0.txt"]


def test_names_stay_within_80_characters_and_unique_however_many_long_axes(write_config):
    axes = [f"tracking.wandb.tags=[[{'x' * 60}], [{'y' * 60}]]",
            f"tracking.wandb.project=[{'p' * 70}, {'q' * 70}]",
            f"tracking.wandb.group=[{'g' * 70}, {'h' * 70}]"]
    sweep = expand_sweep(write_config(), axes)
    assert len(set(names(sweep))) == 8
    assert all(len(name) <= 80 and "/" not in name for name in names(sweep)), names(sweep)


def test_a_mapping_axis_is_merged_into_its_section_as_o_would_be(write_config):
    sweep = expand_sweep(write_config(MODEL), ["pretrain.model=[{hidden_size: 32}, {num_layers: 3}]"])
    assert names(sweep) == ["model-hidden-size-32", "model-num-layers-3"]
    models = [p.config.pretrain.model for p in sweep.points]
    # The file's hidden_size 64 stays where the point does not set it.
    assert [(m.hidden_size, m.num_layers) for m in models] == [(32, 2), (64, 3)]
    assert "pretrain.model.hidden_size=32" in sweep.points[0].cli_overrides
    # A whole section as an axis, in the YAML.
    grid = "sweep:\n  grid:\n    pretrain: [{max_steps: 5}, {max_steps: 7}]\n"
    sweep = expand_sweep(write_config(MODEL + grid))
    assert [(p.config.pretrain.max_steps, p.config.pretrain.model.hidden_size) for p in sweep.points] == [
        (5, 64), (7, 64)]
    assert names(sweep) == ["pretrain-max-steps-5", "pretrain-max-steps-7"]


@pytest.mark.parametrize("overrides, section, message", [
    (["pretrain.lr=[1e-3, 0.001]"], "",
     r"sweep points pretrain\.lr=1e-3 and pretrain\.lr=0\.001 are the same experiment "
     r"\(pretrain\.lr: 1e-3 and 0\.001 validate to the same config\); remove one of the values"),
    (["pretrain.model=[{hidden_size: 64}, {num_layers: 2}]"], MODEL,
     r"sweep points pretrain\.model=.*same experiment"),
    ([], "sweep:\n  points:\n    - {seed: 1}\n    - {seed: 1}\n",
     r"same experiment \(the same values, listed twice\)"),
])
def test_points_that_resolve_to_the_same_config_are_refused_naming_both(
        write_config, overrides, section, message):
    with pytest.raises(ConfigError, match=message):
        expand_sweep(write_config(section), overrides)


def test_a_sweep_larger_than_sweep_max_points_is_refused_before_its_points_are_validated(write_config):
    from pipeline.sweep_config import SweepConfig

    assert SweepConfig().max_points == 256
    bad_values = [f"pretrain.lr=[{', '.join(['-1'] * 17)}]", f"seed=[{', '.join(map(str, range(17)))}]"]
    too_many = (r"this sweep has 289 points \(17 values of pretrain\.lr x 17 values of seed\), "
                r"more than sweep\.max_points \(256\).*-o sweep\.max_points=289")
    with pytest.raises(ConfigError, match=too_many):
        expand_sweep(write_config(), bad_values)  # a value error would name the first point instead
    grid = ("sweep:\n  max_points: 5\n  grid:\n    seed: [1, 2, 3]\n"
            "  points: [{pretrain.lr: 0.1}, {pretrain.lr: 0.2}]\n")
    with pytest.raises(ConfigError, match=r"6 points \(3 values of seed x 2 listed points\), more than "
                                          r"sweep\.max_points \(5\)"):
        expand_sweep(write_config(grid))
    assert len(expand_sweep(write_config(grid), ["sweep.max_points=6"]).points) == 6
