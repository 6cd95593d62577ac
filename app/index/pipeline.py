"""Rebuild a space's index from the database, as a job stage (cpu queue)."""

from __future__ import annotations

from app.errors import InvalidInput
from app.jobs import service as jobs
from app.jobs.runner import JobContext


def rebuild(ctx: JobContext) -> None:
    if ctx.space_id is None:
        raise InvalidInput("an index rebuild job needs a spec space")
    ctx.progress(0.1, f"rebuilding the index of {ctx.space_id} from the database", force=True)
    info = ctx.runtime.indexes.rebuild(ctx.space_id)
    with ctx.runtime.db.session() as session:
        jobs.succeed(
            session,
            ctx.claim,
            result={"space_id": info.space_id, "size": info.size, "version": info.version},
            message=f"rebuilt: {info.size} specs at index version {info.version}",
        )
