"""-e names that nothing reads are refused before anything runs; every name we document works."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_playbook

_spec = importlib.util.spec_from_file_location(
    "raspi_tf_unknown_extra_vars",
    ROOT / "playbooks/lookup_plugins/raspi_tf_unknown_extra_vars.py",
)
assert _spec and _spec.loader
lookup = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lookup)

# -e name=..., -e 'name=...' and -e '{"name": ...}' as written in the docs and the Makefile.
GIVEN = re.compile(r"""-e[\s"',]+\{?"?([a-z_][a-z0-9_]*)["=:]""")


def documented_names() -> set[str]:
    files = [ROOT / "README.md", ROOT / "Makefile", *ROOT.glob("roles/*/README.md")]
    files += [*(ROOT / "molecule").rglob("*.yml"), *(ROOT / "molecule").rglob("*.md")]
    names = set()
    for path in files:
        names |= set(GIVEN.findall(path.read_text()))
    return names


def test_every_documented_name_is_known() -> None:
    names = documented_names()
    assert {"model", "epochs", "strategy", "batch_size", "run"} <= names  # the pattern finds them
    known = lookup.known_names()
    unknown = sorted(n for n in names if n not in known and not n.startswith("ansible_"))
    # molecule's own playbooks read their own names; epoch is the README's example of a typo.
    assert set(unknown) <= {"bench_link_mbit", "epoch"}, unknown


def test_a_typo_gets_the_name_it_meant() -> None:
    result = lookup.unknown(
        ["epoch", "modle", "model", "ansible_user", "zzz"], lookup.known_names()
    )
    assert result == [
        {"name": "epoch", "suggestion": "epochs"},
        {"name": "modle", "suggestion": "model"},
        {"name": "zzz", "suggestion": ""},
    ]


def test_only_an_inventory_name_close_to_a_known_one_is_taken_for_a_typo() -> None:
    names = {"pi1": {"epoch", "my_own_thing", "model", "inventory_dir"}, "pi2": {"epoch"}}
    assert lookup.misspelt(names, lookup.known_names()) == [
        {"name": "epoch", "suggestion": "epochs", "hosts": ["pi1", "pi2"]}
    ]


def test_a_role_fact_of_an_earlier_play_is_no_inventory_typo() -> None:
    # Two train.yml in one ansible-playbook (molecule's side_effect): the second's check sees
    # the facts the first set (training_data_prepared is close to training_run_dataset_prepared).
    names = {"node1": {"training_data_prepared", "tf_cluster_spec", "batch_size"}}
    assert lookup.misspelt(names, lookup.known_names()) == []


def test_the_refusal_names_the_inventory_when_localhost_is_not_in_it(tmp_path: Path) -> None:
    # The checks run on localhost; an inventory of nodes only gives it no inventory_dir.
    inventory = tmp_path / "nodes.yml"
    inventory.write_text("all:\n  hosts:\n    node1:\n      epoch: 3\n")
    result = run_playbook("playbooks/check_extra_vars.yml", "-i", str(inventory))
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert f"Fix: rename it epochs (did you mean epochs?) in {inventory}" in text, text[-2000:]


def test_a_misspelt_inventory_variable_stops_the_playbook_before_it_starts(tmp_path: Path) -> None:
    # A typo in group_vars would leave the default in place, silently: -e epoch=3 is refused,
    # so `epoch: 3` in the inventory must be too, not train 8 epochs.
    inventory = tmp_path / "mine"
    shutil.copytree(ROOT / "inventory" / "local", inventory)
    with (inventory / "group_vars" / "all" / "training.yml").open("a") as handle:
        handle.write("epoch: 3\nmy_own_thing: 1\n")
    result = run_playbook("train.yml", "--check", "-i", str(inventory))
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert (
        "Inventory variable epoch (set for localhost): no raspi-tf playbook or role reads it, so "
        f"it would change nothing. Fix: rename it epochs (did you mean epochs?) in {inventory}"
        in text
    ), text[-2000:]
    assert "my_own_thing" not in text
    assert text.count("PLAY [") == 1  # nothing after the check ran
    allowed = run_playbook(
        "playbooks/stop.yml",
        *("-i", str(inventory), "-e", '{"extra_vars_allowed": ["epoch"]}', "-e", "run=nope"),
    )
    assert "PLAY [Stop a run]" in allowed.stdout


@pytest.mark.parametrize("playbook", ["train.yml", "site.yml", "playbooks/status.yml"])
def test_a_misspelt_name_stops_the_playbook_before_it_starts(playbook: str, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    result = run_playbook(playbook, "-e", "epoch=2", "-e", f"training_run_runs_dir={runs}")
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert "-e epoch: no raspi-tf playbook or role reads this variable" in text, text[-2000:]
    assert "Fix: -e epochs=... (did you mean epochs?)" in text
    assert "PLAY [Check the variable names given with -e and in the inventory]" in text
    assert text.count("PLAY [") == 1  # nothing after the check ran
    assert not runs.exists()


def test_names_the_inventory_reads_can_be_allowed() -> None:
    result = run_playbook(
        "playbooks/stop.yml",
        "-e",
        "my_pi_user=pi",
        "-e",
        '{"extra_vars_allowed": ["my_pi_user"]}',
        "-e",
        "run=no-such-run",
    )
    text = " ".join(result.stdout.split())
    assert "no raspi-tf playbook or role reads" not in text
    assert "PLAY [Stop a run]" in text


def test_words_that_are_not_name_value_are_refused_as_such() -> None:
    # Not "-e _raw_params: no raspi-tf playbook or role reads this variable".
    result = run_playbook("train.yml", "-e", "epochs= 3")
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert "-e: '3' is not part of a name=value" in text, text[-2000:]
    assert "Fix: -e name=value with nothing around '=', such as -e epochs=3" in text
    assert """needs quotes of its own inside the shell's, such as -e "name='two words'\"""" in text
    assert "_raw_params" not in text.split("fatal:")[-1].split("msg:")[-1]
    assert text.count("PLAY [") == 1


def test_every_short_name_has_the_role_names_it_sets() -> None:
    groups = lookup.aliases()
    assert ("training_run_strategy", "tf_cluster_strategy", "strategy") in groups
    assert ("training_run_model", "model") in groups
    # A role defaulting to another role's name may be given another value on purpose.
    assert not [g for g in groups if g[-1] == "training_node_user"]


def test_one_setting_given_twice_is_a_clash_unless_the_role_name_came_with_e() -> None:
    groups = [("training_run_epochs", "epochs")]
    both = {"pi1": {"epochs": 5, "training_run_epochs": 3}, "pi2": {"epochs": 5}}
    assert lookup.contradictions(both, groups, extra={"epochs"}) == [
        {
            "names": ["epochs", "training_run_epochs"],
            "given_values": ["5", "3"],
            "origins": ["-e", "inventory"],
            "hosts": ["pi1"],
        }
    ]
    # -e training_run_epochs=3 over the inventory's epochs: 5 is what its user meant.
    assert lookup.contradictions(both, groups, extra={"training_run_epochs"}) == []
    same = {"pi1": {"epochs": "3", "training_run_epochs": 3}}
    assert lookup.contradictions(same, groups, extra={"epochs", "training_run_epochs"}) == []


def test_two_strategies_at_once_stop_the_playbook_before_it_starts(tmp_path: Path) -> None:
    # Accepted, it would run parameter_server silently: tf_cluster_strategy wins over strategy.
    runs = tmp_path / "runs"
    result = run_playbook(
        "train.yml",
        *("-e", "tf_cluster_strategy=parameter_server", "-e", "strategy=multi_worker_mirrored"),
        *("-e", f"training_run_runs_dir={runs}"),
    )
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert (
        "strategy=multi_worker_mirrored (-e) and tf_cluster_strategy=parameter_server (-e) set "
        "one setting, and tf_cluster_strategy=parameter_server would win. Fix: set it once: "
        "leave out -e tf_cluster_strategy=parameter_server, or the other." in text
    ), text[-2000:]
    assert text.count("PLAY [") == 1
    assert not runs.exists()


DATA_NAMES = ["image_size", "color_mode", "test_fraction", "skip_bad_images", "label_column"]


def test_the_dataset_settings_are_known_by_their_short_names() -> None:
    known = lookup.known_names()
    assert set(DATA_NAMES) <= known
    # Each sets its training_data_ variable, so giving both with two values is a clash.
    groups = lookup.aliases()
    assert {(f"training_data_{name}", name) for name in DATA_NAMES} <= set(groups)
    assert lookup.unknown([*DATA_NAMES, "dataset"], known) == []


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("image_sise", "image_size"),
        ("colour_mode", "color_mode"),
        ("test_fration", "test_fraction"),
        ("skip_bad_image", "skip_bad_images"),
        ("label_col", "label_column"),
    ],
)
def test_a_misspelt_dataset_setting_gets_the_name_it_meant(typo: str, meant: str) -> None:
    assert lookup.unknown([typo], lookup.known_names()) == [{"name": typo, "suggestion": meant}]


def test_a_misspelt_dataset_setting_stops_train_yml_before_it_starts() -> None:
    result = run_playbook("train.yml", "-e", "image_sise=32")
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert "-e image_sise: no raspi-tf playbook or role reads this variable" in text, text[-2000:]
    assert "Fix: -e image_size=... (did you mean image_size?)" in text
    assert text.count("PLAY [") == 1


def test_the_settings_that_take_true_or_false_are_known_by_every_name() -> None:
    names = lookup.boolean_names()
    # A role option of type bool, the short name its default reads, a name read with `| bool`.
    assert {"training_data_skip_bad_images", "skip_bad_images", "export_int8"} <= names
    assert {"monitoring_enabled", "apt_cache_enabled"} <= names
    assert not {"epochs", "export_variants", "dataset"} & names
    given = {"skip_bad_images": "maybe", "export_int8": "YES", "epochs": "x", "x": True}
    assert lookup.bad_booleans(given | {"os_base_grow_swap": "off"}, names) == [
        "-e skip_bad_images=maybe is not true or false. "
        "Fix: -e skip_bad_images=true or -e skip_bad_images=false"
    ]


def test_a_value_that_is_not_true_or_false_stops_train_yml_before_it_starts() -> None:
    # Without the check, skip_bad_images=maybe stopped the role with its argument spec's dump,
    # and export_int8=maybe became false, silently.
    result = run_playbook("train.yml", "-e", "skip_bad_images=maybe", "-e", "export_int8=maybe")
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert "-e skip_bad_images=maybe is not true or false. Fix: -e skip_bad_images=true" in text
    assert "-e export_int8=maybe is not true or false." in text, text[-2000:]
    assert text.count("PLAY [") == 1
