"""Windowing histories held in a framework's own shape, giving back that shape.

One module per framework, each imported on its own (``import ctxwindow`` loads none of
them, and none needs its framework installed until it is imported):

- :mod:`ctxwindow_adapters.openai`: chat-completions dicts (ctxwindow's native shape);
- :mod:`ctxwindow_adapters.openai_responses`: Responses API input items;
- :mod:`ctxwindow_adapters.anthropic`: Anthropic Messages, ``system`` outside the list;
- :mod:`ctxwindow_adapters.langchain`: ``BaseMessage`` lists, and a ``trim_messages``;
- :mod:`ctxwindow_adapters.pydantic_ai`: a history processor for ``Agent``.

Each returns a :class:`~ctxwindow.Window` whose messages are the caller's own objects
(those kept whole are the very objects passed in) and whose record counts positions in
the caller's list.
"""

# The plugin's hook: `ctxwindow select` reads Anthropic request bodies through it.
from ctxwindow_adapters.bodies import register_request_formats as register_request_formats
