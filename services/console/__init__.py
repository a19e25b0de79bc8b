"""The Jetway console: a web UI served by the apply API at `/ui/` (standalone, `jetway up`).

- `logins.py` one-time login codes, browser sessions and who may call what (pure decisions);
- `timeline.py` a resource's events as the timeline shows them, and its state as of any of them;
- `events.py` where an event lives, by its id (a bounded index the watcher feeds as it folds, then a bounded scan):
  the timeline's causation and correlation links, followed to another resource's timeline;
- `figures.py` the pool members page's router figures (rates, error rate, TTFT quantiles) from the router's counters;
- `web.py` the console's routes on the apply API's aiohttp app: the static pages, the login link,
  the live watch (Server-Sent Events), the history and the playground's chat, relayed to the router;
- `static/` the pages: plain ES modules and CSS, no build step, nothing fetched from the web.

The console has no API of its own beyond these few routes: its pages call the apply API with the
session cookie, which the API takes in place of the bearer token (docs/console.md).
"""
