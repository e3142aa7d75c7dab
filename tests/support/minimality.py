"""The minimality attack on a series' suppressed rows (Wong, Fu, Wang, Pei, Minimality Attack
in Privacy Preserving Data Publishing, VLDB 2007), as an adversary who has read the README and
the code mounts it.

The adversary knows who is in each snapshot and which group each published person is in (the
paper's adversary: membership and QIDs), reads the public files, and knows each snapshot's
value totals, hence the suppressed set's multiset. From these it recomputes every person's
history (Lemma 4 of Wong et al., ICDE 2010: the audit's own :class:`Ledger`), and so, for
each suppressed person ``o``, the values ``V(o)`` of the set for which the strategy's plan
exceeds the cap ``strategy.group_size_cap`` (a group holding the value could not take ``o``).

A rule that withholds a row because *its own* value needs more than the cap makes every
withheld person with ``V(o)`` non-empty hold a value of ``V(o)``: when ``V(o)`` has one value,
the attack *claims* it. A claim is a *pin* (certain) only if no world the adversary cannot
tell apart gives ``o`` another value:

* under that rule, with the manifest stating ``suppressed_set.decoys`` (the landed main before
  issue 26), the rows withheld for their own value are ``rows - decoys``; when exactly that
  many suppressed persons have a non-empty ``V(o)``, each holds a value of it, and every claim
  is certain (54 persons of a 12-release Adult churn series, every one right);
* the rule the planner applies now reads no value: permuting the values among the rows it
  withholds leaves every published byte the same (the permutation test of
  ``test_suppressed_set.py``), so a claim is refuted whenever another withheld row of the
  release holds another value.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stream_release.audit.ledger import VALUE_SPACE, Ledger, exact_inverse, forced_threshold


@dataclass
class AttackReport:
    """What the attack found over a series."""

    claims: list[tuple[int, str, str, bool]] = field(default_factory=list)
    """(release, person, value, right): the attack's claims, one value of ``V(o)`` each, and
    whether it is the person's true value."""
    pins: list[tuple[int, str, str, bool]] = field(default_factory=list)
    """The claims no world the adversary cannot tell apart refutes: certain."""
    withheld: int = 0
    """Rows the adversary computes as withheld for their history, over the series."""
    past_people: list[int] = field(default_factory=list)
    """Per release, its individuals with a protected pair whose breach is above ``1/l``
    (exactly, from the files)."""
    past_ever: set[str] = field(default_factory=set)
    """The individuals past ``1/l`` in some release."""

    @property
    def right(self) -> int:
        """Claims that name the person's true value."""
        return sum(1 for claim in self.claims if claim[3])


def attack_series(
    out: Path,
    private: Path,
    snapshots: list[Path],
    *,
    id_column: str,
    sensitive: str,
    delimiter: str = ";",
) -> AttackReport:
    """Mount the attack on the series in ``out`` (public) with the adversary's knowledge from
    ``private`` (who is in which group, and each suppressed set's multiset); the snapshots
    give the truth the claims are scored against."""
    ledger = Ledger()
    report = AttackReport()
    for k, snapshot in enumerate(snapshots, start=1):
        manifest = json.loads((out / f"manifest-{k:04d}.json").read_text())
        lines = [json.loads(x) for x in (out / f"release-{k:04d}.jsonl").read_text().splitlines()]
        with (private / f"assignments-{k:04d}.csv").open(newline="") as fh:
            assigned = [(row[0], row[1]) for row in list(csv.reader(fh))[1:]]
        multiset = json.loads((private / f"private-{k:04d}.json").read_text())["suppressed"]
        counts = {str(v): int(c) for v, c in multiset["sensitive"].items()}
        with snapshot.open(newline="") as fh:
            truth = {r[id_column]: r[sensitive] for r in csv.DictReader(fh, delimiter=delimiter)}
        strategy = manifest["strategy"]
        protected = set(strategy.get("protected") or [])
        threshold = forced_threshold(
            float(manifest["l"]), int(strategy["group_size_cap"]), strategy
        )
        ids = [i for i, _ in assigned]
        rows = ledger.index(ids)
        star = [r for (i, g), r in zip(assigned, rows.tolist(), strict=True) if g == ""]
        star_ids = [i for i, g in assigned if g == ""]
        names = [v for v, c in counts.items() if c and (not protected or v in protected)]

        # every person the rule withholds: a protected plan above the cap, whatever it holds
        prot = np.array([not protected or v in protected for v in ledger.value_names()], dtype=bool)
        owner = ledger.keys // VALUE_SPACE
        mine = np.isin(owner, rows) & prot[ledger.keys % VALUE_SPACE]
        below = ledger.keep_below(ledger.keys[mine], threshold)
        withheld_rows = set((ledger.keys[mine][below] // VALUE_SPACE).tolist())
        row_of = dict(zip(ids, rows.tolist(), strict=True))
        withheld = [i for i in star_ids if row_of[i] in withheld_rows]
        report.withheld += len(withheld)

        # the claims: a suppressed person whose history leaves one value of the set above the
        # cap holds that value (as a rule reading the row's own value would make it)
        codes = np.array([ledger.value(v) for v in names], dtype=np.int64)
        candidates = 0
        claims = []
        for person, r in zip(star_ids, star, strict=True):
            if not names:
                break
            over = ledger.keep_below(r * VALUE_SPACE + codes, threshold)
            candidates += int(over.any())
            if int(over.sum()) == 1:
                value = names[int(np.flatnonzero(over)[0])]
                claims.append((k, person, value, truth[person] == value))
        decoys = manifest.get("suppressed_set", {}).get("decoys")
        for claim in claims:
            _, person, value, _ = claim
            report.claims.append(claim)
            if isinstance(decoys, int):  # the count argument of the rule that read values
                certain = candidates == len(star) - decoys
            else:  # refuted when another withheld row holds another value (a permuted world)
                others = {truth[i] for i in withheld if i != person}
                certain = person not in withheld or not (others - {value})
            if certain:
                report.pins.append(claim)

        # link the release: published rows to their group's values, suppressed ones to the set
        sizes = {int(line["group"]): int(line["size"]) for line in lines}
        held = {int(line["group"]): line["sensitive"] for line in lines}
        first = int(manifest.get("first_group", 0))
        keys_l, n_l, c_l = [], [], []
        for (_, g), r in zip(assigned, rows.tolist(), strict=True):
            if g == "":
                for v, c in counts.items():
                    keys_l.append(r * VALUE_SPACE + ledger.value(v))
                    n_l.append(len(star))
                    c_l.append(c)
            else:
                group = int(g) + first
                for v, c in held[group].items():
                    keys_l.append(r * VALUE_SPACE + ledger.value(str(v)))
                    n_l.append(sizes[group])
                    c_l.append(int(c))
        ledger.link(
            np.array(keys_l, dtype=np.int64),
            np.array(n_l, dtype=np.int64),
            np.array(c_l, dtype=np.int64),
        )
        prot = np.array([not protected or v in protected for v in ledger.value_names()], dtype=bool)
        owner = ledger.keys // VALUE_SPACE
        mine = np.isin(owner, rows) & prot[ledger.keys % VALUE_SPACE]
        above = ledger.above(ledger.keys[mine], exact_inverse(float(manifest["l"])))
        past = np.unique(owner[mine][above])
        report.past_people.append(int(past.shape[0]))
        names = {int(r): i for i, r in zip(ids, rows.tolist(), strict=True)}
        report.past_ever.update(names[int(r)] for r in past.tolist())
    return report
