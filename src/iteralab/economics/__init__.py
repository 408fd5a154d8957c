"""Package prices and the calendar window, with the kit's arithmetic: reads the package catalog CSV (default
kit/tarifs-forfaits.csv), calendar task TOML files and the shipped kit/ files; writes only an exported kit
folder (``export_kit``): prices, costs per result and window quotes are returned to the caller."""
