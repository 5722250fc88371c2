"""`specgate ab`: two builds or two configs (A and B) measured in alternating rounds on one
machine and judged on their paired differences -- the merge gate that holds on a drifting box.

    plan.py     the command line: the common overrides, A's and B's own (a:KEY=VALUE,
                b:KEY=VALUE), both sides composed and checked before any server starts; the
                ABBA order of the rounds
    driver.py   the rounds: per round and arm, a fresh server per side (or both kept up),
                one load each, through the measurement every driver shares (harness/run/arm.py)
    record.py   the A/B record (kind "ab": ab.json, summary.md, each side's requests)

The verdicts are the registry's "ab" gates (harness/gates/ab.py) on the paired change with
a round-blocked interval (harness/gates/change.py `judge_paired`).
"""
