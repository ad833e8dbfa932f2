"""A LiteLLM custom provider that answers like a model using one tool, `weather`.

The proxy serves it as the model `afk-weather` (see `litellm.rs`). A conversation without a tool
result gets a call of `weather` for Oslo; one with a tool result gets the final answer (`$AFK_MOCK_LLM_FINAL`). Every
request appends a line to `$AFK_MOCK_LLM_LOG` (so a check can count model calls). When the file
`$AFK_MOCK_LLM_HOLD` exists as a request with a tool result arrives, the handler removes it,
creates `$AFK_MOCK_LLM_HOLD.held` and answers only a minute later: a client killed meanwhile was
killed while it waited for the model's second answer.
"""

import asyncio
import json
import os

import litellm
from litellm import CustomLLM

FINAL = os.environ.get("AFK_MOCK_LLM_FINAL", "Cloudy in Oslo, 12 degrees.")


def _log(kind):
    path = os.environ.get("AFK_MOCK_LLM_LOG")
    if path:
        with open(path, "a") as f:
            f.write(kind + "\n")


class Weather(CustomLLM):
    async def acompletion(self, model, messages, *args, **kwargs):
        answered = any(m.get("role") == "tool" for m in messages)
        if not answered:
            _log("call")
            call = {
                "id": "call_weather_1",
                "type": "function",
                "function": {"name": "weather", "arguments": json.dumps({"city": "Oslo"})},
            }
            return await litellm.acompletion(
                model="openai/mock", messages=messages, mock_response="", mock_tool_calls=[call]
            )
        _log("final")
        hold = os.environ.get("AFK_MOCK_LLM_HOLD")
        if hold and os.path.exists(hold):
            os.remove(hold)
            open(hold + ".held", "w").close()
            await asyncio.sleep(60)
        return await litellm.acompletion(model="openai/mock", messages=messages, mock_response=FINAL)


handler = Weather()
