"""Make the built pages run clean in a browser, online and from disk (file://).

tests/test_browser.py opens every page in headless Chromium and fails on any JavaScript error.
Three things in the stock Jupyter Book 1.x stack print one; this extension fixes each at build
time, without patching the installed packages:

1. sphinx-thebe adds its inline `const THEBE_JS_URL = ...` script twice (once with the
   filename None, once with ""), so every page threw "Identifier 'THEBE_JS_URL' has already been
   declared". Identical scripts are now emitted once.
2. pydata-sphinx-theme logs "Got invalid theme mode" on a reader's first visit unless the page
   context names a default mode; we name the theme's own default, "auto" (follow the reader's
   system), which is what the theme falls back to anyway.
3. Sphinx's search page fetches every hit's page to show a text snippet. Browsers block fetch()
   on file:// pages, so offline search logged CORS errors (the hits themselves were found). On
   file:// the snippets are switched off; served over http(s) they stay on.
"""

SEARCH_SNIPPETS_OFF_ON_FILE = (
    'if (location.protocol === "file:") { DOCUMENTATION_OPTIONS.SHOW_SEARCH_SUMMARY = false; }'
)


def default_theme_mode(app, config):
    config.html_context.setdefault("default_mode", "auto")


def drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen, unique = set(), []
    for js in scripts:
        key = (
            str(getattr(js, "filename", js) or ""),
            getattr(js, "priority", 500),
            tuple(sorted(getattr(js, "attributes", {}).items())),
        )
        if key not in seen:
            seen.add(key)
            unique.append(js)
    scripts[:] = unique  # in place: Sphinx restores its own list before the next page


def setup(app):
    app.connect("config-inited", default_theme_mode)
    app.connect("html-page-context", drop_duplicate_scripts, priority=900)
    # after documentation_options.js (priority 200), before any search runs
    app.add_js_file(None, body=SEARCH_SNIPPETS_OFF_ON_FILE, priority=210)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
