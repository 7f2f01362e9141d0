"""This machine: what fits in its memory, how long a round will take here (the pace estimate and
its cache), how many threads to use. Pure arithmetic over settings and measured rates; the
measuring itself is in backends/."""
