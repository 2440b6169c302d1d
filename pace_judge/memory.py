"""PACE's memory bank (§4.2): stored protocols with their dimension embeddings, and fast/slow routing.

    python pace_judge/memory.py list memory=DIR
    python pace_judge/memory.py show memory=DIR dimension="tactile satisfaction"
    python pace_judge/memory.py import memory=DIR protocol=FILE [replace=true]
    python pace_judge/memory.py delete memory=DIR dimension="tactile satisfaction"
    python pace_judge/memory.py route memory=DIR dimension="surface feel" [theta=0.8]

Settings: pace_judge/commands/memory.py (MemorySettings).
"""

from pace_judge.commands.memory import SUBCOMMANDS, MemorySettings, run
from reward.core.cli import main

if __name__ == "__main__":
    main("memory", run, schema=MemorySettings, doc=__doc__, subcommands=SUBCOMMANDS)
