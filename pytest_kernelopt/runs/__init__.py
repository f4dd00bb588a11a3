"""What a run leaves on disk, as records: a tuning run's records and its run directory
(:mod:`.records`, :mod:`.trace`), the gate's result and ``kernelopt merge``
(:mod:`.gate_result`) and the summary every gate output renders (:mod:`.gate_summary`).

Below the agents, the report, gitops and the gate: the report renders a run from these
records and never imports the code that made it.
"""
