"""Summary, traces, plots and comparisons of simulated and executed steps."""

import logging

# A font cache that another installation built (its font paths since removed) makes matplotlib
# log "findfont: Font family ... not found" for every mathtext family and fall back to DejaVu
# Sans, which is what these figures are drawn in anyway: noise a user cannot act on, on the
# standard error of every command that draws.
logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
