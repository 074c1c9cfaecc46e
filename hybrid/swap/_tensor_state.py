"""Columns of the swap kernel's per-tensor state array (shared by the kernel and the eviction policies)."""
RES = 0    # 1 while the tensor has a device copy (in the walk's view)
MAT = 1    # node that made the current device copy (compute or swap_in), -1 if none
LNODE = 2  # last node touching the device copy (its last reader, or MAT)
LPOS = 3   # schedule position of its last use, -1 if unused so far
HV = 4     # 1 while the host copy is valid
HVN = 5    # swap_out node that made the host copy valid, -1 if it was valid from the start
RELN = 6   # node that released the last device copy, -1 if none
CUR = 7    # number of its uses (as an input) already walked past
INIT = 8   # 1 if resident at the iteration's start (in this pass)
PIN = 9    # stamp (position + 1) of the op that pins it: its inputs and outputs cannot be evicted
EVI = 10   # 1 if it was resident at the start and evicted after use
DRP = 11   # 1 while dropped without a host copy: recomputed (hybrid.swap.recompute) before its next use
PROT = 12  # schedule position up to which a pending recompute reads it: it may be swapped, not dropped, until then
DEP = 13   # recompute chain depth it had when dropped (1: its producer's inputs were all available)
N_STATE = 14
