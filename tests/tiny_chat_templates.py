"""Chat templates of the tiny test checkpoints, one per model family, written in each family's style.

They are not the hub templates, but render the same structure: system prompt with the tool list,
user/assistant turns, assistant tool calls, tool results and reasoning where the family has it.
Rendered with ``trim_blocks``/``lstrip_blocks`` (as transformers and ft_core do): trim_blocks drops a
newline right after a block tag, so ``_keep_newlines`` turns every such newline into ``{{ "\\n" }}``.
Tool-call ``arguments`` may be a dict or an already-serialised JSON string.
"""

# Shared Jinja snippet: ``args`` = the call's arguments as JSON text.
_ARGS = (
    "{% if tc.function is defined %}{% set tc = tc.function %}{% endif %}"
    "{% if tc.arguments is string %}{% set args = tc.arguments %}"
    "{% else %}{% set args = tc.arguments | tojson %}{% endif %}"
)

# The index of the last user message: reasoning of assistant turns after it is kept.
_LAST_USER = (
    "{% set ns = namespace(last_user=-1) %}"
    "{% for m in messages %}{% if m.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}"
)

# Qwen (ChatML, Qwen3 thinking, <tool_call> JSON, tool results as a user turn of <tool_response> blocks).
QWEN = (
    _LAST_USER + "{% if tools %}<|im_start|>system\n"
    "{% if messages and messages[0].role == 'system' %}{{ messages[0].content }}{{ '\\n\\n' }}{% endif %}"
    "# Tools\n\nThese functions are available; their signatures follow in <tools></tools> tags:\n<tools>"
    "{% for t in tools %}{{ '\\n' }}{{ t | tojson }}{% endfor %}"
    "\n</tools>\n\nTo call one, write a JSON object with its name and arguments inside <tool_call></tool_call> tags:\n"
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% elif messages and messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' or (m.role == 'system' and not loop.first) %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n"
    "{% if loop.index0 > ns.last_user and m.reasoning_content %}"
    "<think>\n{{ m.reasoning_content | trim }}\n</think>\n\n{% endif %}"
    "{{ m.content or '' }}"
    "{% for tc in m.tool_calls or [] %}"
    + _ARGS
    + "{% if loop.first and m.content %}{{ '\\n' }}{% endif %}"
    '{% if not loop.first %}{{ "\\n" }}{% endif %}'
    '<tool_call>\n{"name": "{{ tc.name }}", "arguments": {{ args }}}\n</tool_call>'
    "{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n' }}<tool_response>\n{{ m.content }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)

# The index of the last real user query: a user turn that is not only tool results (Qwen3.5 style).
_LAST_QUERY = (
    "{% set ns = namespace(last_user=-1) %}"
    "{% for m in messages %}{% set c = (m.content or '') | trim %}"
    "{% if m.role == 'user' and not (c.startswith('<tool_response>') and c.endswith('</tool_response>')) %}"
    "{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}"
)

# Qwen3.5 / Qwen3.6 (ChatML; tool list first in the system turn, the system text after it; calls as
# <function=NAME> blocks of <parameter=KEY> values, strings raw and other values JSON; every assistant turn
# after the last user query carries a <think> block, earlier ones lose theirs unless preserve_thinking;
# the generation prompt opens a thinking block, or writes an empty one when enable_thinking is false).
# A call whose arguments are a JSON string (the hub template wants a mapping) is written as it is.
QWEN35 = (
    _LAST_QUERY
    + "{% set sys = (messages[0].content or '') | trim if messages and messages[0].role == 'system' else '' %}"
    "{% if tools %}<|im_start|>system\n# Tools\n\nThese functions are available to you:\n\n<tools>"
    "{% for t in tools %}{{ '\\n' }}{{ t | tojson }}{% endfor %}"
    "\n</tools>\n\nTo call a function, reply with this form only, nothing after it:\n\n"
    "<tool_call>\n<function=function_name>\n<parameter=parameter_name>\nvalue, which may span lines\n</parameter>\n"
    "</function>\n</tool_call>\n\nOne <function=...> block goes inside each <tool_call></tool_call> pair, every "
    "required parameter is given, and any reasoning comes before the call."
    "{% if sys %}{{ '\\n\\n' }}{{ sys }}{% endif %}<|im_end|>\n"
    "{% elif sys %}<|im_start|>system\n{{ sys }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}{% set c = (m.content or '') | trim %}"
    "{% if m.role == 'user' or (m.role == 'system' and not loop.first) %}"
    "<|im_start|>{{ m.role }}\n{{ c }}<|im_end|>\n"
    "{% elif m.role == 'assistant' %}"
    "{% if m.reasoning_content is string %}{% set think = m.reasoning_content | trim %}"
    "{% elif '</think>' in c %}{% set think = c.split('</think>')[0].split('<think>')[-1] | trim %}"
    "{% set c = c.split('</think>')[-1] | trim %}"
    "{% else %}{% set think = '' %}{% endif %}"
    "<|im_start|>assistant\n"
    "{% if loop.index0 > ns.last_user or preserve_thinking is true %}<think>\n{{ think }}\n</think>\n\n{% endif %}"
    "{{ c }}"
    "{% for tc in m.tool_calls or [] %}{% if tc.function is defined %}{% set tc = tc.function %}{% endif %}"
    "{% if not loop.first %}{{ '\\n' }}{% elif c %}{{ '\\n\\n' }}{% endif %}"
    "<tool_call>\n<function={{ tc.name }}>\n"
    "{% if tc.arguments is mapping %}{% for k, v in tc.arguments.items() %}<parameter={{ k }}>\n"
    "{% if v is string %}{{ v }}{% else %}{{ v | tojson }}{% endif %}\n</parameter>\n{% endfor %}"
    "{% elif tc.arguments %}{{ tc.arguments }}\n{% endif %}"
    "</function>\n</tool_call>"
    "{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n' }}<tool_response>\n{{ c }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is false %}<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}"
)

# DeepSeek-V3.x: BOS, system text, full-width role markers, tool calls between special markers.
DEEPSEEK = (
    _LAST_USER + "{{ bos_token }}"
    "{% if messages and messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}"
    "{% if tools %}{{ '\\n\\n' }}## Tools\nYou can call the following functions:\n"
    "{% for t in tools %}{% set f = t.function or t %}\n### {{ f.name }}\n{{ f.description }}\n"
    "Parameters: {{ f.parameters | tojson }}\n{% endfor %}"
    "\nTo call a function answer with: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>name<｜tool▁sep｜>{arguments JSON}"
    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' %}<｜User｜>{{ m.content }}"
    "{% elif m.role == 'assistant' %}"
    "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<｜Assistant｜>"
    "{% if loop.index0 > ns.last_user and m.reasoning_content %}<think>{{ m.reasoning_content }}</think>"
    "{% else %}</think>{% endif %}"
    "{% endif %}{{ m.content or '' }}"
    "{% if m.tool_calls %}<｜tool▁calls▁begin｜>"
    "{% for tc in m.tool_calls %}"
    + _ARGS
    + "<｜tool▁call▁begin｜>{{ tc.name }}<｜tool▁sep｜>{{ args }}<｜tool▁call▁end｜>{% endfor %}"
    "<｜tool▁calls▁end｜>{% endif %}<｜end▁of▁sentence｜>"
    "{% elif m.role == 'tool' %}"
    "{% if messages[loop.index0 - 1].role != 'tool' %}<｜tool▁outputs▁begin｜>{% endif %}"
    "<｜tool▁output▁begin｜>{{ m.content }}<｜tool▁output▁end｜>"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<｜tool▁outputs▁end｜>{% endif %}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}"
    "{% if not messages or messages[-1].role != 'tool' %}<｜Assistant｜>{% endif %}"
    "{% if thinking is defined and thinking %}<think>{% else %}</think>{% endif %}{% endif %}"
)

# Mistral/Mixtral: [INST] turns, system text before the last user message, tool list before it.
MISTRAL = (
    _LAST_USER
    + "{% set sys = messages[0].content if messages and messages[0].role == 'system' else '' %}"
    "{{ bos_token }}"
    "{% for m in messages %}"
    "{% if m.role == 'user' %}"
    "{% if tools and loop.index0 == ns.last_user %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}"
    "[INST]{{ ' ' }}{% if sys and loop.index0 == ns.last_user %}{{ sys }}{{ '\\n\\n' }}{% endif %}"
    "{{ m.content }}[/INST]"
    "{% elif m.role == 'assistant' %}"
    "{% if m.tool_calls %}[TOOL_CALLS][{% for tc in m.tool_calls %}"
    + _ARGS
    + '{% if not loop.first %}, {% endif %}{"name": "{{ tc.name }}", "arguments": {{ args }}}{% endfor %}]</s>'
    "{% else %}{{ ' ' }}{{ m.content }}</s>{% endif %}"
    "{% elif m.role == 'tool' %}"
    '[TOOL_RESULTS]{"content": {{ m.content | tojson }}}[/TOOL_RESULTS]'
    "{% endif %}{% endfor %}"
)

# OLMoE (Tulu style): <|role|> lines; tools and calls as tagged JSON in plain text.
OLMOE = (
    "{% set sys = messages[0].content if messages and messages[0].role == 'system' else '' %}"
    "{% if sys or tools %}<|system|>\n{{ sys }}"
    "{% if tools %}{% if sys %}{{ '\\n' }}{% endif %}You can call these functions:\n<functions>"
    "{% for t in tools %}{{ '\\n' }}{{ t | tojson }}{% endfor %}\n</functions>{% endif %}{{ '\\n' }}{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' %}<|user|>\n{{ m.content }}\n"
    "{% elif m.role == 'assistant' %}<|assistant|>\n{{ m.content or '' }}"
    "{% if m.tool_calls %}<function_calls>{% for tc in m.tool_calls %}"
    + _ARGS
    + '{{ "\\n" }}{"name": "{{ tc.name }}", "arguments": {{ args }}}{% endfor %}\n</function_calls>{% endif %}'
    "<|endoftext|>\n"
    "{% elif m.role == 'tool' %}<|user|>\n<function_results>\n{{ m.content }}\n</function_results>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

# gpt-oss harmony: system + developer (instructions, tools as a TypeScript-like namespace), channels.
HARMONY = (
    _LAST_USER + "<|start|>system<|message|>You are a helpful assistant.\n"
    "Reasoning: {{ reasoning_effort if reasoning_effort is defined else 'medium' }}\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message."
    "{% if tools %}{{ '\\n' }}Calls to these tools must go to the commentary channel: 'functions'.{% endif %}<|end|>"
    "{% set sys = messages[0].content if messages and messages[0].role == 'system' else '' %}"
    "{% if sys or tools %}<|start|>developer<|message|>"
    "{% if sys %}# Instructions\n\n{{ sys }}{% endif %}"
    "{% if tools %}{% if sys %}{{ '\\n\\n' }}{% endif %}# Tools\n\n## functions\n\nnamespace functions {\n"
    "{% for t in tools %}{% set f = t.function or t %}{{ '\\n' }}// {{ f.description }}\n"
    "type {{ f.name }} = (_: {{ f.parameters | tojson }}) => any;\n{% endfor %}"
    "\n} // namespace functions{% endif %}<|end|>{% endif %}"
    "{% set st = namespace(tool='') %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' %}<|start|>user<|message|>{{ m.content }}<|end|>"
    "{% elif m.role == 'assistant' %}"
    "{% set think = m.reasoning_content or m.thinking %}"
    "{% if think and (loop.index0 > ns.last_user or m.tool_calls) %}"
    "<|start|>assistant<|channel|>analysis<|message|>{{ think }}<|end|>{% endif %}"
    "{% if m.content %}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>{% endif %}"
    "{% for tc in m.tool_calls or [] %}" + _ARGS + "{% set st.tool = tc.name %}"
    "<|start|>assistant<|channel|>commentary to=functions.{{ tc.name }} <|constrain|>json<|message|>{{ args }}<|call|>"
    "{% endfor %}"
    "{% elif m.role == 'tool' %}"
    "<|start|>functions.{{ m.name or st.tool }} to=assistant<|channel|>commentary<|message|>{{ m.content }}<|end|>"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)

# GLM-4.5: [gMASK]<sop>, <|role|> markers, XML-ish tool calls with <arg_key>/<arg_value> pairs.
GLM = (
    _LAST_USER + "[gMASK]<sop>"
    "{% set sys = messages[0].content if messages and messages[0].role == 'system' else '' %}"
    "{% if sys or tools %}<|system|>\n{{ sys }}"
    "{% if tools %}{% if sys %}{{ '\\n' }}{% endif %}# Tools\n\nYou may call one or more of these functions:\n<tools>"
    "{% for t in tools %}{{ '\\n' }}{{ t | tojson }}{% endfor %}\n</tools>\n\n"
    "Write each call as:\n<tool_call>{function-name}\n<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>\n"
    "...\n</tool_call>{% endif %}{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' %}<|user|>\n{{ m.content }}"
    "{% if enable_thinking is defined and not enable_thinking and loop.index0 == ns.last_user %}/nothink{% endif %}"
    "{% elif m.role == 'assistant' %}<|assistant|>"
    "{% if loop.index0 > ns.last_user and m.reasoning_content %}\n<think>{{ m.reasoning_content }}</think>"
    "{% else %}\n<think></think>{% endif %}"
    "{% if m.content %}{{ '\\n' }}{{ m.content }}{% endif %}"
    "{% for tc in m.tool_calls or [] %}"
    "{% if tc.function is defined %}{% set tc = tc.function %}{% endif %}{{ '\\n' }}<tool_call>{{ tc.name }}"
    "{% if tc.arguments is mapping %}{% for k, v in tc.arguments.items() %}\n<arg_key>{{ k }}</arg_key>\n<arg_value>"
    "{% if v is string %}{{ v }}{% else %}{{ v | tojson }}{% endif %}</arg_value>{% endfor %}"
    "{% else %}{{ '\\n' }}{{ tc.arguments }}{% endif %}\n</tool_call>{% endfor %}"
    "{% elif m.role == 'tool' %}"
    "{% if messages[loop.index0 - 1].role != 'tool' %}<|observation|>{% endif %}"
    "\n<tool_response>\n{{ m.content }}\n</tool_response>"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>"
    "{% if enable_thinking is defined and not enable_thinking %}\n<think></think>{% endif %}{% endif %}"
)


def _keep_newlines(template: str) -> str:
    """Make a newline written right after ``%}`` survive ``trim_blocks``."""
    return template.replace("%}\n", "%}{{ '\\n' }}")


_SOURCES = {
    "qwen": QWEN,
    "qwen35": QWEN35,
    "deepseek": DEEPSEEK,
    "mistral": MISTRAL,
    "olmoe": OLMOE,
    "harmony": HARMONY,
    "glm": GLM,
}
TEMPLATES: dict[str, str] = {name: _keep_newlines(t) for name, t in _SOURCES.items()}
