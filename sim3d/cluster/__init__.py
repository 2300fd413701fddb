"""The hardware: GPU presets (`gpus`), fabrics (`fabric`), the networkx graph of links
(`topology`), and which GPU each (tp, cp, ep, dp, pp) coordinate lands on (`placement`)."""
