"""The CLI's command groups, each a thin shell over one stage: reads the arguments, calls the library, prints.

``iteralab.cli`` assembles them into one ``typer`` application; nothing here holds logic the library lacks.
"""
