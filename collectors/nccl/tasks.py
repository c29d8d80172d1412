"""A launcher's task number is a rank only when the launcher started the ranks itself.

``srun -l`` prefixes each line with its task number (``3: ``), mpirun with its rank (``[1,3]<stdout>:``).
With one task per rank that number is the global rank. But ``srun --ntasks-per-node=1 torchrun …`` (or
``mpirun -npernode 1``) starts one launcher per node, and every rank of that node prints under the
node's one task number: ``0: node07:48211:48388 [1] NCCL WARN …`` and ``0: node07:48212:48390 [2] …``
are two ranks, neither of them rank 0. The lines themselves tell: a task number under which NCCL
headers of two or more processes appear numbers a node, not a rank. From then on its lines keep no
rank (a wrong rank puts a line on another rank's GPU; none leaves it to the header's host and device),
and launcher_places never makes it a rank (collectors/framework/launcher_places.py ``node_task``).
"""

from __future__ import annotations

from collectors.nccl.state import MAX_PROCS, ReaderState
from collectors.nccl.times import Prefix


class LauncherTasks(ReaderState):
    """Tells the task numbers of per-node launchers from ranks, as the NCCL headers under them show."""

    def _task_header(self, pre: Prefix, host: str, pid: int) -> None:
        """An NCCL header under a launcher's task number: the second process seen there makes the
        task a node's."""
        if not pre.from_launcher or pre.rank is None:
            return
        procs = self.task_procs.setdefault(pre.rank, set())
        if len(procs) < 2 and len(self.task_procs) < MAX_PROCS:
            procs.add((host, pid))
        if len(procs) >= 2:
            self.places.node_task(pre.rank)
            pre.rank, pre.from_launcher = None, False

    def _untask(self, pre: Prefix) -> Prefix:
        """The prefix without a rank taken from a task number already known to be a node's."""
        if pre.from_launcher and pre.rank is not None and len(self.task_procs.get(pre.rank, ())) >= 2:
            pre.rank, pre.from_launcher = None, False
        return pre
