"""Exact inference on graphs of moderate treewidth: the junction tree (elimination orders, the
static plan, the batched log-sum-exp contraction, exact samples)."""

from isingattn.inference.junction_tree.engine import JunctionTree, plan_for
from isingattn.inference.junction_tree.ffbs import sample_junction_tree

__all__ = ["JunctionTree", "plan_for", "sample_junction_tree"]
