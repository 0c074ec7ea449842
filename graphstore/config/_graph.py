"""``graphMetadata`` and ``taskMetadata``: the declared node and edge types (internal module;
import the names from :mod:`graphstore.config`)."""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Iterable

from pydantic import Field, ValidationError, ValidationInfo, field_validator

from graphstore.config._fields import EDGE_TYPE_SEP, Issues, Model, Name


def unique(items: Iterable[Any], shown: Callable[[Any], Any] = lambda x: x) -> Issues:
    """``is listed twice`` for each item equal to an earlier one."""
    issues, seen = Issues(), []
    for i, item in enumerate(items):
        if item in seen:
            issues.bad((i,), shown(item), "is listed twice")
        seen.append(item)
    return issues


class EdgeType(Model):
    """A directed edge type ``src --relation--> dst``, as the user reads it."""

    doc_name: ClassVar[str] = "edge type"

    src_node_type: Name = Field(alias="srcNodeType", description="The node type edges start at.")
    relation: Name = Field(description="The relation, e.g. `buys`.")
    dst_node_type: Name = Field(alias="dstNodeType", description="The node type edges end at.")

    def __init__(self, **data: Any) -> None:
        """Keyword construction from code; a bad name is one line: ``EdgeType: relation 'a-b' ...``.
        (Pydantic calls this for YAML mappings too: their problems stay where they are.)"""
        try:
            super().__init__(**data)
        except ValidationError as exc:
            if "src_node_type" not in data:
                raise
            err = exc.errors()[0]
            raise ValueError(f"EdgeType: {'.'.join(map(str, err['loc']))} {err.get('input')!r} "
                             f"{err['msg'].removeprefix('Value error, ')}") from None

    def __str__(self) -> str:
        return EDGE_TYPE_SEP.join(self.as_tuple())

    def as_tuple(self) -> tuple[str, str, str]:
        """``(src_node_type, relation, dst_node_type)``, the PyG / GLT edge type tuple."""
        return (self.src_node_type, self.relation, self.dst_node_type)

    @classmethod
    def parse(cls, text: str) -> EdgeType:
        """Parse ``"src__relation__dst"`` (the ``str()`` form)."""
        parts = text.split(EDGE_TYPE_SEP)
        if len(parts) != 3:
            raise ValueError(f"EdgeType.parse: {text!r} is not of the form 'src__relation__dst'")
        return cls(src_node_type=parts[0], relation=parts[1], dst_node_type=parts[2])

    def reverse(self) -> EdgeType:
        """The reverse edge type, with graphlearn-for-pytorch's convention (``reverse_edge_type``).

        ``user-buys->item`` becomes ``item-rev_buys->user`` and ``rev_`` is stripped again on the way
        back; an edge type whose two ends are the same node type is its own reverse.
        """
        if self.src_node_type == self.dst_node_type:
            return self
        relation = self.relation[4:] if self.relation.startswith("rev_") else "rev_" + self.relation
        return EdgeType(src_node_type=self.dst_node_type, relation=relation,
                        dst_node_type=self.src_node_type)


class GraphMetadata(Model):
    """The declared node and edge types, in file order."""

    node_types: tuple[Name, ...] = Field(alias="nodeTypes", description=(
        "Node types, at least one, no duplicates. Order matters (defaults below follow it). Each needs "
        "a node table (`datasetConfig.dataSources.nodes`) or must be an end of an edge type; otherwise "
        "the partitioner has no node of it to number, and loading the config says so."))
    edge_types: tuple[EdgeType, ...] = Field(alias="edgeTypes", description=(
        "Edge types, at least one, no duplicates. Both ends must be declared node types."))

    @property
    def is_homogeneous(self) -> bool:
        """One node type and one edge type: loaders take plain tensors instead of typed dicts."""
        return len(self.node_types) == 1 and len(self.edge_types) == 1

    @field_validator("node_types")
    @classmethod
    def _node_types(cls, node_types: tuple[str, ...]) -> tuple[str, ...]:
        issues = unique(node_types)
        if not node_types:
            issues.bad((), [], "must declare at least one node type")
        issues.raise_any()
        return node_types

    @field_validator("edge_types")
    @classmethod
    def _edge_types(cls, edge_types: tuple[EdgeType, ...], info: ValidationInfo) -> tuple[EdgeType, ...]:
        issues = unique(edge_types, str)
        if not edge_types:
            issues.bad((), [], "must declare at least one edge type")
        node_types = info.data.get("node_types")
        for i, et in enumerate(edge_types):
            issues.member((i, "srcNodeType"), et.src_node_type, node_types, "node type")
            issues.member((i, "dstNodeType"), et.dst_node_type, node_types, "node type")
        issues.raise_any()
        return edge_types


class HardNegatives(Model):
    """Known negatives of one supervision edge type: edges of another declared edge type, from the
    same anchor node type to the same label node type, each meaning "this anchor does NOT link to
    this node"."""

    doc_name: ClassVar[str] = "hard negatives entry"

    supervision_edge_type: EdgeType = Field(alias="supervisionEdgeType", description=(
        "A supervision edge type (listed in `supervisionEdgeTypes`), at most one entry each."))
    negative_edge_type: EdgeType = Field(alias="negativeEdgeType", description=(
        "A declared edge type (`graphMetadata.edgeTypes`) with the same source and destination node "
        "types, not a supervision edge type, named by one entry only. Its edges are labels only, never "
        "message-passing edges (no reverse type is added for it); its edge source has no weight or "
        "feature columns."))


class LinkPredictionTask(Model):
    """``nodeAnchorBasedLinkPredictionTaskMetadata``."""

    doc_inline: ClassVar[bool] = True

    supervision_edge_types: tuple[EdgeType, ...] = Field((), alias="supervisionEdgeTypes", description=(
        "Edge types whose edges are the link-prediction labels. Each must be in "
        "`graphMetadata.edgeTypes`. The library handles the reversal that "
        "`sample_edge_direction: in` implies."))
    hard_negatives: tuple[HardNegatives, ...] = Field((), alias="hardNegativeEdgeTypes", description=(
        "Hard negatives when supervision gives them: for a supervision edge type, the edge type whose "
        "edges are its anchors' known negatives (e.g. `user dislikes item` for `user buys item`). They "
        "are split with their anchors' positives (the same splitter: per anchor, or per edge by the same "
        "hash rule), served with the anchors of each split (`ABLPInputNodes.negative_labels`), and the "
        "default trainer adds them to each anchor's negatives in its loss "
        "(`trainerArgs.hard_negatives_per_anchor`); evaluation is unchanged. Not in replicated mode yet "
        "(refused with the resource config)."))

    @field_validator("supervision_edge_types")
    @classmethod
    def _unique(cls, edge_types: tuple[EdgeType, ...]) -> tuple[EdgeType, ...]:
        unique(edge_types, str).raise_any()
        return edge_types

    @field_validator("hard_negatives")
    @classmethod
    def _hard_negatives(cls, entries: tuple[HardNegatives, ...],
                        info: ValidationInfo) -> tuple[HardNegatives, ...]:
        """Each entry names a listed supervision type once, and a negative type of the same node
        types that is no supervision type and no other entry's negative type."""
        issues, supervision = Issues(), info.data.get("supervision_edge_types")
        negatives = [e.negative_edge_type for e in entries]
        for i, (e, neg) in enumerate(zip(entries, negatives)):
            sup = e.supervision_edge_type
            if sup in [earlier.supervision_edge_type for earlier in entries[:i]]:
                issues.bad((i, "supervisionEdgeType"), str(sup), "is listed twice")
            if supervision is not None and sup not in supervision:
                issues.bad((i, "supervisionEdgeType"), str(sup),
                           "is not listed in supervisionEdgeTypes; list it there first")
            if (neg.src_node_type, neg.dst_node_type) != (sup.src_node_type, sup.dst_node_type):
                issues.bad((i, "negativeEdgeType"), str(neg),
                           f"must join the same node types as {sup} ({sup.src_node_type} -> "
                           f"{sup.dst_node_type})")
            if supervision is not None and neg in supervision:
                issues.bad((i, "negativeEdgeType"), str(neg),
                           "is a supervision edge type; a negative type holds known non-links only")
            if neg in negatives[:i]:
                issues.bad((i, "negativeEdgeType"), str(neg), "is named by an earlier entry too")
        issues.raise_any()
        return entries

    @property
    def negative_types(self) -> dict[EdgeType, EdgeType]:
        """``{supervision edge type: its negative edge type}``, in entry order."""
        return {e.supervision_edge_type: e.negative_edge_type for e in self.hard_negatives}


class TaskMetadata(Model):
    """``taskMetadata``: what the task learns."""

    doc_inline: ClassVar[bool] = True

    link_prediction: LinkPredictionTask = Field(
        default_factory=LinkPredictionTask, alias="nodeAnchorBasedLinkPredictionTaskMetadata",
        description="Node-anchor-based link prediction.")
