"""Connection handler tasks of the edge: tracked, and quiet when cancelled at shutdown."""
import asyncio
import functools


def connection_handler(handler):
    """Wrap a connection handler: its task is tracked (stop() cancels what is left) and ends
    quietly when cancelled at shutdown (asyncio would log a cancelled handler as an error)."""
    @functools.wraps(handler)
    async def wrapper(self, *args):
        edge = getattr(self, "edge", self)
        task = asyncio.current_task()
        edge.connections.add(task)
        try:
            await handler(self, *args)
        except asyncio.CancelledError:
            pass
        finally:
            edge.connections.discard(task)
    return wrapper
