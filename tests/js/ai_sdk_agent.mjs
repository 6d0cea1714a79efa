// The Vercel AI SDK as a rollout worker uses it: ai 7 + @ai-sdk/otel through the official OTel JS
// SDK and its OTLP/HTTP protobuf exporter, into `otel-trackio serve`.
//
// Reads one JSON plan on stdin (written by tests/test_ai_sdk.py):
//   {endpoint, steps, integrations: ["legacy" | "otel", ...],
//    scenarios: [{call: "generateText" | "streamText", system, question,
//                 rounds: [[{id, tool, input}, ...], ...], answer, usage: {input, output}}]}
// For each integration, in turn: a tracer provider whose resource names the Trackio run
// (`trackio.run` = the integration), `registerTelemetry(new LegacyOpenTelemetry())` or
// `registerTelemetry(new OpenTelemetry())`, then steps x scenarios samples, each under a `rollout`
// span with `step`, `sample_index` and (set at its end) `reward`. The model is the SDK's scripted
// MockLanguageModelV4: round i answers with that round's tool calls (several = parallel calls),
// then with the answer text. Prints one JSON line per sample: what the SDK did (its steps' tool
// calls and results, the answer, the total usage).
import { context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, TracerProvider } from "@opentelemetry/sdk-trace";
import { LegacyOpenTelemetry, OpenTelemetry } from "@ai-sdk/otel";
import { generateText, registerTelemetry, isStepCount, streamText, tool } from "ai";
import { MockLanguageModelV4, convertArrayToReadableStream } from "ai/test";
import { z } from "zod";

const INTEGRATIONS = { legacy: LegacyOpenTelemetry, otel: OpenTelemetry };

// The tools: results the Python test can compute (a text, and a JSON object).
const tools = {
  calculator: tool({
    description: "Add numbers written as a+b",
    inputSchema: z.object({ expr: z.string() }),
    execute: async ({ expr }) => String(expr.split("+").reduce((s, n) => s + Number(n), 0)),
  }),
  weather: tool({
    description: "The weather in a city",
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => ({ city, temp_c: city.length }),
  }),
};

function usageOf(scenario) {
  const { input, output } = scenario.usage;
  return {
    inputTokens: { total: input, noCache: input, cacheRead: undefined, cacheWrite: undefined },
    outputTokens: { total: output, text: output, reasoning: undefined },
  };
}

// What the model says in call number `index` of a scenario: tool calls, then the answer.
function turn(scenario, index) {
  const calls = scenario.rounds[index];
  if (calls === undefined) {
    return { content: [{ type: "text", text: scenario.answer }], finish: "stop" };
  }
  return {
    content: calls.map((c) => ({
      type: "tool-call",
      toolCallId: c.id,
      toolName: c.tool,
      input: JSON.stringify(c.input),
    })),
    finish: "tool-calls",
  };
}

function scriptedModel(scenario) {
  let calls = 0;
  const finishReason = (finish) => ({ unified: finish, raw: finish });
  return new MockLanguageModelV4({
    provider: "mock-provider",
    modelId: "mock-model",
    doGenerate: async () => {
      const { content, finish } = turn(scenario, calls++);
      return { content, finishReason: finishReason(finish), usage: usageOf(scenario), warnings: [] };
    },
    doStream: async () => {
      const { content, finish } = turn(scenario, calls++);
      const parts = [{ type: "stream-start", warnings: [] }];
      for (const part of content) {
        if (part.type === "text") {
          parts.push({ type: "text-start", id: "t" });
          for (const word of part.text.split(/(?<= )/)) {
            parts.push({ type: "text-delta", id: "t", delta: word });
          }
          parts.push({ type: "text-end", id: "t" });
        } else {
          parts.push(part);
        }
      }
      parts.push({ type: "finish", finishReason: finishReason(finish), usage: usageOf(scenario) });
      return { stream: convertArrayToReadableStream(parts) };
    },
  });
}

async function runScenario(scenario) {
  const options = {
    model: scriptedModel(scenario),
    system: scenario.system,
    prompt: scenario.question,
    tools,
    stopWhen: isStepCount(scenario.rounds.length + 1),
    telemetry: { functionId: "rollout-agent" },
  };
  let result;
  if (scenario.call === "generateText") {
    result = await generateText(options);
  } else {
    result = streamText(options);
    await result.consumeStream();
  }
  const steps = (await result.steps).map((step) => ({
    text: step.text,
    toolCalls: step.toolCalls.map((c) => ({ id: c.toolCallId, tool: c.toolName, input: c.input })),
    toolResults: step.toolResults.map((r) => ({ id: r.toolCallId, output: r.output })),
  }));
  return { text: await result.text, steps, usage: await result.totalUsage };
}

async function runIntegration(plan, name) {
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ "service.name": "ai-sdk-agent", "trackio.run": name }),
    spanProcessors: [
      new BatchSpanProcessor({
        exporter: new OTLPTraceExporter({ url: `${plan.endpoint}/v1/traces` }),
        scheduledDelayMillis: 200,
      }),
    ],
  });
  trace.setGlobalTracerProvider(provider);
  // ai has no unregister: each integration gets the global list to itself.
  globalThis.AI_SDK_TELEMETRY_INTEGRATIONS = [];
  registerTelemetry(new INTEGRATIONS[name]());
  const tracer = trace.getTracer("rollout");
  for (let step = 0; step < plan.steps; step++) {
    for (const [index, scenario] of plan.scenarios.entries()) {
      const attributes = { step, sample_index: index };
      const result = await tracer.startActiveSpan("rollout", { attributes }, async (span) => {
        try {
          const out = await runScenario(scenario);
          span.setAttribute("reward", out.text === scenario.answer ? 1.0 : 0.0);
          return out;
        } finally {
          span.end();
        }
      });
      console.log(JSON.stringify({ integration: name, step, sample_index: index, ...result }));
    }
  }
  await provider.shutdown(); // flushes every span to the receiver
  trace.disable();
}

async function main() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const plan = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  for (const name of plan.integrations) await runIntegration(plan, name);
}

await main();
