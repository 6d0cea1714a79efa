// An agent with no OpenTelemetry, on the official `openai` Node package, through
// `otel-trackio serve --upstream`: each sample's calls go to its own base URL
// (`<proxy>/rollouts/<step>/<sample_index>/v1`), then its reward and its end are posted.
//
// Reads one JSON plan on stdin (written by tests/frameworks/test_proxy_node.py):
//   {proxy, model, steps, samples, stream}
// Each sample: ask, run the `calculator` tool the model calls, send the result back, take the
// answer (streamed when `stream`); reward = the sample index. Prints one JSON line per sample.
import OpenAI from "openai";

const plan = JSON.parse(await new Promise((resolve) => {
  let text = "";
  process.stdin.on("data", (chunk) => (text += chunk));
  process.stdin.on("end", () => resolve(text));
}));

const tools = [{
  type: "function",
  function: { name: "calculator", parameters: { type: "object", properties: { expr: { type: "string" } } } },
}];

async function ask(client, messages) {
  if (!plan.stream) {
    const answer = await client.chat.completions.create({ model: plan.model, messages, tools });
    return answer.choices[0].message;
  }
  const stream = await client.chat.completions.create({
    model: plan.model, messages, tools, stream: true, stream_options: { include_usage: true },
  });
  let content = "";
  const calls = [];
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      content += choice.delta.content ?? "";
      for (const part of choice.delta.tool_calls ?? []) {
        calls[part.index] ??= { id: "", type: "function", function: { name: "", arguments: "" } };
        calls[part.index].id = part.id ?? calls[part.index].id;
        calls[part.index].function.name += part.function?.name ?? "";
        calls[part.index].function.arguments += part.function?.arguments ?? "";
      }
    }
  }
  return calls.length ? { role: "assistant", content: content || null, tool_calls: calls }
    : { role: "assistant", content };
}

async function sample(step, index) {
  const base = `${plan.proxy}/rollouts/${step}/${index}`;
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "k" });
  const messages = [
    { role: "system", content: "be brief" },
    { role: "user", content: "what is 2+2?" },
  ];
  for (;;) {
    const reply = await ask(client, messages);
    messages.push(reply);
    if (!reply.tool_calls?.length) break;
    for (const call of reply.tool_calls) {
      messages.push({ role: "tool", tool_call_id: call.id, content: "4" });
    }
  }
  const post = (what, body) => fetch(`${base}/${what}`, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body ?? {}),
  });
  if (!(await post("reward", { value: index })).ok) throw new Error("reward refused");
  if (!(await post("end")).ok) throw new Error("end refused");
  return { step, index, answer: messages.at(-1).content };
}

for (let step = 0; step < plan.steps; step++) {
  const done = await Promise.all(
    Array.from({ length: plan.samples }, (_, index) => sample(step, index)),
  );
  for (const line of done) console.log(JSON.stringify(line));
}
