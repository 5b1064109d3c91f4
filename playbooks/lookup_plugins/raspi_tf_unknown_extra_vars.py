"""Lookup raspi_tf_unknown_extra_vars: the -e names that no playbook or role reads.

Ansible takes any ``-e name=value`` and silently ignores a name nothing reads, so
``-e epoch=2`` trains for the default 8 epochs. The playbooks refuse such names
before they change anything (playbooks/check_extra_vars.yml).
"""

from __future__ import annotations

import difflib
import itertools
import re
from pathlib import Path
from typing import Any

import yaml
from ansible.plugins.lookup import LookupBase
from ansible.utils.vars import load_extra_vars

DOCUMENTATION = """
name: raspi_tf_unknown_extra_vars
short_description: The -e variable names that no raspi-tf playbook or role reads
description:
  - Returns one dict per unknown name, in the order given, with keys C(name) and
    C(suggestion) (the closest known name, or an empty string); for words that are not
    name=value (C(-e 'epochs= 3')), C(name) is C(_raw_params) and C(raw) holds them.
  - Known names are the keys of every role's defaults, vars and argument specs, the
    short names roles read as C(name | default(...)) (model, epochs, ...), node
    attributes read through hostvars, every C(ansible_*) name, and O(allowed).
  - With O(inventory), returns instead the inventory's variables that read as a misspelt
    known name (difflib ratio 0.8 or more, such as C(epoch) for C(epochs)), each with keys C(name),
    C(suggestion) and C(hosts); names close to no known one are the inventory's own.
options:
  allowed:
    description: Further names to accept (an inventory's own variables).
    type: list
    elements: str
    default: []
  inventory:
    description: Check every host's inventory variables instead of the -e names.
    type: bool
    default: false
  given:
    description: Return instead every name given with -e (known or not), in the order given.
    type: bool
    default: false
  booleans:
    description:
      - Return instead one sentence per -e value that is not true or false for a name that
        takes only those (a role option of type bool, a short name such a role default reads,
        or a name read as C(name | default(...) | bool)). C(-e skip_bad_images=maybe) would stop
        the role with Ansible's argument-spec dump, or turn silently into false.
    type: bool
    default: false
  contradictions:
    description:
      - Return instead the settings given twice, under a short name and a role's name for it
        (C(-e strategy=...) and C(tf_cluster_strategy=...)), with different values; the role's
        name would win, silently. One dict per clash, keys C(names), C(given_values), C(origins)
        (C(-e) or C(inventory)) and C(hosts).
    type: bool
    default: false
"""

REPO = Path(__file__).resolve().parents[2]
# A name read with a default, not an attribute (x.msg | default) or a key (x['a'] | default).
DEFAULTED = re.compile(r"(?<![\w.\]'\"])([a-z_][a-z0-9_]*)\s*\|\s*default\(")
HOSTVAR = re.compile(r"hostvars\[[^\]]*\]\.([a-z_][a-z0-9_]*)")


def _keys(path: Path) -> set[str]:
    data = yaml.safe_load(path.read_text()) or {}
    return set(data) if isinstance(data, dict) else set()


#: The modules whose arguments name facts a task sets on its host.
SET_FACT = ("ansible.builtin.set_fact", "set_fact")


def _facts(tasks: Any) -> set[str]:
    """The names that ``set_fact`` tasks in a task list set, blocks included.

    A role's facts (``training_data_prepared``, ``tf_cluster_spec``) stay
    among a host's variables for the later plays of the same
    ``ansible-playbook``: they are known names, not an inventory's misspellings.
    """
    names: set[str] = set()
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, dict):
            continue
        for module in SET_FACT:
            if isinstance(task.get(module), dict):
                names |= {name for name in task[module] if name != "cacheable"}
        for section in ("block", "rescue", "always"):
            names |= _facts(task.get(section))
    return names


def known_names(repo: Path = REPO) -> set[str]:
    """Every variable name a raspi-tf playbook or role reads.

    Args:
        repo: the checkout holding roles/ and playbooks/.

    Returns:
        The names (str), without the ``ansible_`` ones, which are always known.
    """
    names: set[str] = set()
    roles = repo / "roles"
    for path in [*roles.glob("*/defaults/*.yml"), *roles.glob("*/vars/*.yml")]:
        names |= _keys(path)
    for path in roles.glob("*/meta/argument_specs.yml"):
        specs = (yaml.safe_load(path.read_text()) or {}).get("argument_specs", {})
        for entry in specs.values():
            names |= set(entry.get("options", {}))
    for path in roles.glob("*/tasks/*.yml"):
        names |= _facts(yaml.safe_load(path.read_text()))
    texts = [*roles.rglob("*.yml"), *roles.rglob("*.j2"), *(repo / "playbooks").glob("*.yml")]
    for path in texts:
        text = path.read_text()
        names |= set(DEFAULTED.findall(text)) | set(HOSTVAR.findall(text))
    return {name for name in names if not name.startswith("__")}


#: The name Ansible gives the words of an -e that are not name=value ("-e 'epochs= 3'").
RAW = "_raw_params"


def unknown(given: list[str], known: set[str]) -> list[dict[str, str]]:
    """The names of ``given`` that are not ``known`` nor ``ansible_*``, with the closest known one.

    Args:
        given: -e variable names, in the order given.
        known: the names that something reads.

    Returns:
        ``[{"name": ..., "suggestion": ...}]``; the suggestion is the closest known name by
        difflib's ratio (at least 0.6), or "".
    """
    result = []
    for name in given:
        if name in known or name.startswith("ansible_"):
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1)
        result.append({"name": name, "suggestion": close[0] if close else ""})
    return result


#: Names Ansible itself puts among a host's variables.
MAGIC = {
    "groups",
    "group_names",
    "hostvars",
    "inventory_dir",
    "inventory_file",
    "inventory_hostname",
    "inventory_hostname_short",
    "omit",
    "play_hosts",
    "playbook_dir",
    "role_names",
}
#: How close (difflib's ratio) an inventory variable must be to a known name to be taken
#: for its misspelling: epoch -> epochs is 0.91, batchsize -> batch_size 0.95.
TYPO_RATIO = 0.8


def misspelt(names_by_host: dict[str, set[str]], known: set[str]) -> list[dict[str, Any]]:
    """The inventory variables that read as a misspelt known name, with the hosts that set them.

    A name that is close to no known name is taken for the inventory's own (for its other
    playbooks) and left alone; only a near miss such as ``epoch`` for ``epochs`` is returned.

    Args:
        names_by_host: each host's variable names, as the inventory sets them.
        known: the names that something reads.

    Returns:
        ``[{"name": ..., "suggestion": ..., "hosts": [...]}]``, by name.
    """
    hosts_of: dict[str, list[str]] = {}
    for host, names in names_by_host.items():
        for name in names:
            if name in known or name in MAGIC or name.startswith(("ansible_", "_")):
                continue
            hosts_of.setdefault(name, []).append(host)
    result = []
    for name in sorted(hosts_of):
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=TYPO_RATIO)
        if close:
            result.append({"name": name, "suggestion": close[0], "hosts": sorted(hosts_of[name])})
    return result


#: A role default that reads other names: ``training_run_model: "{{ model | default(...) }}"``.
#: Only the names its value starts with, each the default of the one before, count.
ALIAS_DEFAULT = re.compile(r"^\{\{\s*((?:[a-z_][a-z0-9_]*\s*\|\s*default\(\s*)+)[^|]*\}\}$", re.S)


def aliases(repo: Path = REPO) -> list[tuple[str, ...]]:
    """The names that set one setting: a role default and the names its value reads first.

    ``training_run_strategy: "{{ tf_cluster_strategy | default(strategy | default(...)) }}"``
    gives ``("training_run_strategy", "tf_cluster_strategy", "strategy")``. Only defaults that
    end in a short name (one no role's name starts: model, epochs, strategy) count; a role
    that takes another role's name as its default (monitoring_user from training_node_user)
    may be given another value on purpose.

    Args:
        repo: the checkout holding roles/.

    Returns:
        One tuple of names (str) per such default, the role's name first, sorted by it.
    """
    roles = tuple(f"{path.name}_" for path in (repo / "roles").iterdir() if path.is_dir())
    result = []
    for path in sorted((repo / "roles").glob("*/defaults/*.yml")):
        data = yaml.safe_load(path.read_text()) or {}
        for key, value in data.items() if isinstance(data, dict) else ():
            match = ALIAS_DEFAULT.match(value.strip()) if isinstance(value, str) else None
            if not match:
                continue
            names = re.findall(r"[a-z_][a-z0-9_]*", match.group(1).replace("default(", ""))
            if names and not names[-1].startswith((*roles, "ansible_")):
                result.append((key, *names))
    return sorted(result)


def contradictions(
    values_by_host: dict[str, dict[str, Any]],
    groups: list[tuple[str, ...]],
    extra: set[str],
) -> list[dict[str, Any]]:
    """The settings each host is given twice, under two names of one group, with different values.

    The role's name wins; that is what its user meant only when it alone came with -e
    (``-e training_run_epochs=3`` over the inventory's ``epochs: 8``), which is not a clash.

    Args:
        values_by_host: each host's variables (``hostvars``: the inventory's and the -e ones).
        groups: names that set one setting, as ``aliases()`` gives them.
        extra: the names given with -e.

    Returns:
        ``[{"names": [a, b], "given_values": [va, vb], "origins": ["-e" | "inventory", ...],
        "hosts": [...]}]``: one entry per clash, with every host that has it, by names.
    """
    found: dict[tuple[Any, ...], list[str]] = {}
    for host in sorted(values_by_host):
        values = values_by_host[host]
        for group in groups:
            given = [name for name in reversed(group) if name in values]
            for first, second in itertools.pairwise(given):
                a, b = str(values[first]), str(values[second])
                # A role's name given with -e over a short one of the inventory wins, as meant.
                if a != b and not (second in extra and first not in extra):
                    found.setdefault((first, second, a, b), []).append(host)
    return [
        {
            "names": [first, second],
            "given_values": [a, b],
            "origins": ["-e" if n in extra else "inventory" for n in (first, second)],
            "hosts": hosts,
        }
        for (first, second, a, b), hosts in sorted(found.items())
    ]


#: A name read as a boolean with a default: ``export_int8 | default(false) | bool``.
READ_AS_BOOL = re.compile(r"(?<![\w.])([a-z][a-z0-9_]*)\s*\|\s*default\([^()|]*\)\s*\|\s*bool\b")


def boolean_names(repo: Path = REPO) -> set[str]:
    """The variable names that take only true or false.

    The options of type bool in every role's argument specs, the short names their
    defaults read (``skip_bad_images`` for ``training_data_skip_bad_images``), and the names
    read as ``name | default(...) | bool`` in roles and playbooks.

    Args:
        repo: the checkout holding roles/ and playbooks/.

    Returns:
        The names (str), none starting with ``__``.
    """
    names: set[str] = set()
    for path in (repo / "roles").glob("*/meta/argument_specs.yml"):
        specs = (yaml.safe_load(path.read_text()) or {}).get("argument_specs", {})
        for entry in specs.values():
            for name, option in (entry.get("options") or {}).items():
                if isinstance(option, dict) and option.get("type") == "bool":
                    names.add(name)
    for group in aliases(repo):
        if group[0] in names:
            names |= set(group)
    for path in [*(repo / "roles").rglob("*.yml"), *(repo / "playbooks").glob("*.yml")]:
        names |= set(READ_AS_BOOL.findall(path.read_text()))
    return names


def bad_booleans(extra: dict[str, Any], booleans: set[str]) -> list[str]:
    """Why each -e value of a name in ``booleans`` that is not true or false is refused.

    Ansible's spellings count (https://docs.ansible.com/ansible/latest/reference_appendices/
    YAMLSyntax.html: true/false, yes/no, on/off, 1/0, in any letter case).

    Args:
        extra: the -e variables, name -> value.
        booleans: the names that take only true or false (:func:`boolean_names`).

    Returns:
        One sentence per refused value, with the fix, in the order given.
    """
    from ansible.module_utils.parsing.convert_bool import BOOLEANS

    spellings = {str(b).lower() for b in BOOLEANS}
    return [
        f"-e {name}={value} is not true or false. Fix: -e {name}=true or -e {name}=false"
        for name, value in extra.items()
        if name in booleans and not isinstance(value, bool) and str(value).lower() not in spellings
    ]


def _values(hostvars: Any, names: set[str]) -> dict[str, Any]:
    """The ``names`` a host has among its variables, templated as Ansible would read them."""
    result = {}
    for name in names & set(hostvars):
        try:
            result[name] = hostvars[name]
        except Exception:  # a value that does not template is the roles' to refuse
            continue
    return result


class LookupModule(LookupBase):
    """``query('raspi_tf_unknown_extra_vars', allowed=[...])``: see DOCUMENTATION."""

    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """The unknown -e names of this ansible-playbook command, as ``unknown()`` gives them."""
        self.set_options(var_options=variables, direct=kwargs)
        extra = load_extra_vars(self._loader)
        known = known_names() | set(self.get_option("allowed"))
        if self.get_option("booleans"):
            return bad_booleans(dict(extra), boolean_names())
        if self.get_option("given"):
            return [name for name in extra if name != RAW]
        if self.get_option("contradictions"):
            hostvars = (variables or {}).get("hostvars", {})
            hosts = (variables or {}).get("groups", {}).get("all", [])
            names = {name for group in aliases() for name in group}
            values = {h: _values(hostvars[h], names) for h in hosts}
            return contradictions(values, aliases(), set(extra))
        if self.get_option("inventory"):
            hostvars = (variables or {}).get("hostvars", {})
            hosts = (variables or {}).get("groups", {}).get("all", [])
            return misspelt({h: set(hostvars[h]) - set(extra) for h in hosts}, known)
        result = unknown(list(extra), known)
        for item in result:
            if item["name"] == RAW:
                item["raw"] = str(extra[RAW])
        return result
