"""The Protocols between layers are kept by what implements them: every member a Protocol declares
(a method, a property, an attribute) is on each class that stands for it — the embedded and Milvus
arms for the backend's (indexes/backends.py), the relations wing's types for what the relation store
reads of a plan (indexes/relation_shapes.py). A member renamed on one side fails here, not in a
search that happens to take the other backend."""
import inspect

import pytest

from indexes import backends, relation_shapes


def members(proto) -> set[str]:
    names = {n for n, v in vars(proto).items() if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    return names | set(proto.__annotations__)


def has(cls, name: str) -> bool:
    if hasattr(cls, name) or name in getattr(cls, "__annotations__", {}):
        return True
    for klass in cls.__mro__:   # an attribute set on the instance (self.kind = ...) or a dataclass field
        try:
            src = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if f"self.{name} =" in src or f"self.{name}, " in src or f"\n    {name}:" in src:
            return True
    return False


def test_members_reads_a_protocol():
    assert {"search", "add", "kind", "dirty", "generation"} <= members(backends.DenseArm)
    assert {"relations", "singles", "space"} <= members(relation_shapes.PlanShape)


def _impl(path: str):
    module, name = path.rsplit(".", 1)
    return getattr(__import__(module, fromlist=[name]), name)


CASES = [
    (backends.SparseArm, "indexes.sparse.SparseIndex"),
    (backends.SparseArm, "indexes.milvus.MilvusSparseIndex"),
    (backends.DenseArm, "indexes.dense.DenseIndex"),
    (backends.DenseArm, "indexes.milvus.MilvusDenseIndex"),
    (backends.Backend, "indexes.backends.EmbeddedBackend"),
    (backends.Backend, "indexes.backends.MilvusBackend"),
    (relation_shapes.SlotShape, "engine.relations.packs.Slot"),
    (relation_shapes.RelationShape, "engine.relations.packs.Relation"),
    (relation_shapes.ConstraintShape, "engine.relations.constraints.Constraint"),
    (relation_shapes.BoundShape, "engine.relations.constraints.Bound"),
    (relation_shapes.GroupShape, "engine.relations.plan.Group"),
    (relation_shapes.PlanShape, "engine.relations.plan.Plan"),
    (relation_shapes.SpaceShape, "engine.relations.workspaces.Space"),
]


@pytest.mark.parametrize("proto, impl", CASES, ids=[f"{p.__name__}-{i.rsplit('.', 1)[1]}" for p, i in CASES])
def test_every_member_a_protocol_declares_is_there(proto, impl):
    cls = _impl(impl)
    missing = sorted(n for n in members(proto) if not has(cls, n))
    assert not missing, f"{impl} lacks {missing} of {proto.__name__}"
