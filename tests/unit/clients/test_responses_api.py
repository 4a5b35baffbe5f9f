"""Chat requests as Responses API requests, and Responses API answers as completions."""

from __future__ import annotations

from prime_rl.clients.chat import parse_response, responses_body


def test_a_chat_conversation_with_tool_calls_becomes_responses_input_items():
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "1+2?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "3"},
        ],
        "max_completion_tokens": 9,
        "temperature": 0.3,
        "tools": [{"type": "function", "function": {"name": "add", "parameters": {}}}],
        "tool_choice": {"type": "function", "function": {"name": "add"}},
        "return_token_ids": True,
        "seed": 4,
    }
    out = responses_body(body)
    assert out["input"] == [
        {"role": "user", "content": "1+2?"},
        {"type": "function_call", "call_id": "c1", "name": "add", "arguments": '{"a": 1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "3"},
    ]
    assert out["max_output_tokens"] == 9 and out["temperature"] == 0.3 and out["store"] is False
    assert out["tools"] == [{"type": "function", "name": "add", "parameters": {}}]
    assert out["tool_choice"] == {"type": "function", "name": "add"}
    assert "return_token_ids" not in out and "messages" not in out and "seed" not in out


def test_an_answer_with_text_and_a_function_call_and_a_length_cut():
    data = {
        "model": "m",
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [
            {"type": "reasoning", "content": []},
            {
                "type": "message",
                "content": [
                    {"type": "output_text", "text": "Let me "},
                    {"type": "output_text", "text": "add."},
                ],
            },
            {"type": "function_call", "call_id": "c9", "name": "add", "arguments": '{"a": 2}'},
        ],
        "usage": {"input_tokens": 12, "output_tokens": 7},
    }
    comp = parse_response(data, "http://s")
    assert comp.text == "Let me add." and comp.finish_reason == "length"
    assert (comp.input_tokens, comp.output_tokens) == (12, 7)
    assert comp.tool_calls == [
        {"id": "c9", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}}
    ]
    done = parse_response({"status": "completed", "output": [], "usage": {}}, "http://s")
    assert done.finish_reason == "stop" and done.text == "" and done.tool_calls is None
