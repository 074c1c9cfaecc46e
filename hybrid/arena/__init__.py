"""Static arena planning (MegEngine seed; issue 19, not built yet): a byte offset for every buffer of a fixed
schedule in one arena, with view forwarding and in-place overwrite, heuristics (greedy by size, best fit) and
an exact search, and arena offsets for every byte-budget plan."""
