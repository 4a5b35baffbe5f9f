"""A task's own responses_create_params (NeMo Gym rows) over the run's parameters."""

from __future__ import annotations

from prime_rl.collect.runner import request_body, task_params

RUN = {"model": "m", "max_output_tokens": 64, "temperature": 1.0, "seed": 3}
ADD = {
    "type": "function",
    "name": "add",
    "description": "Add two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]},
}


def test_a_tasks_sampling_fields_replace_the_runs_and_its_tools_are_sent_in_chat_shape():
    row = {
        "responses_create_params": {
            "input": [{"role": "user", "content": "1+2?"}],
            "model": "someone-elses-model",
            "temperature": 0.2,
            "max_output_tokens": 16,
            "tools": [ADD],
            "tool_choice": {"type": "function", "name": "add"},
            "parallel_tool_calls": False,
        }
    }
    params = task_params(RUN, row)
    assert params["temperature"] == 0.2 and params["max_output_tokens"] == 16 and params["model"] == "m"
    body = request_body(params, [{"role": "user", "content": "1+2?"}], 0, 0)
    assert body["temperature"] == 0.2 and body["max_completion_tokens"] == 16 and body["model"] == "m"
    assert body["tools"] == [
        {
            "type": "function",
            "function": {k: v for k, v in ADD.items() if k != "type"},
        }
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "add"}}
    assert body["parallel_tool_calls"] is False and "input" not in body
    assert RUN == {"model": "m", "max_output_tokens": 64, "temperature": 1.0, "seed": 3}  # not changed


def test_rows_without_options_of_their_own_use_the_run_parameters_as_they_are():
    assert task_params(RUN, {"question": "q"}) is RUN
    assert task_params(RUN, {"responses_create_params": {"input": "hi"}}) is RUN
    chat_tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    body = request_body(task_params(RUN, {"responses_create_params": {"tools": chat_tools}}), [], 0, 0)
    assert body["tools"] == chat_tools  # already in chat shape: sent unchanged
