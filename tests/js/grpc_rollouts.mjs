// Rollouts from Node through the official OTel JS SDK's OTLP/gRPC trace exporter
// (@opentelemetry/exporter-trace-otlp-grpc, gzip), into `otel-trackio serve`'s gRPC port.
//
// Usage: node grpc_rollouts.mjs ENDPOINT STEPS SAMPLES [TOKEN]
// Each sample: a `rollout` root (step, sample_index, reward) with a `chat` child carrying the
// GenAI input messages. Prints "exported" once the provider has flushed and shut down.
import { context, trace } from "@opentelemetry/api";
import { Metadata } from "@grpc/grpc-js";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-grpc";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, TracerProvider } from "@opentelemetry/sdk-trace";

const [endpoint, steps, samples, token] = process.argv.slice(2);
const metadata = new Metadata();
if (token) metadata.set("authorization", `Bearer ${token}`);
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
const exporter = new OTLPTraceExporter({ url: endpoint, compression: "gzip", metadata });
const provider = new TracerProvider({
  resource: resourceFromAttributes({ "service.name": "js-grpc-worker" }),
  spanProcessors: [new BatchSpanProcessor({ exporter, maxExportBatchSize: 32 })],
});
const tracer = provider.getTracer("rollout");
for (let step = 0; step < Number(steps); step++) {
  for (let i = 0; i < Number(samples); i++) {
    tracer.startActiveSpan("rollout", { attributes: { step, sample_index: i } }, (root) => {
      const chat = tracer.startSpan("chat policy", {
        attributes: {
          "gen_ai.operation.name": "chat",
          "gen_ai.input.messages": JSON.stringify([
            { role: "user", parts: [{ type: "text", content: `js q${i}` }] },
          ]),
        },
      });
      chat.end();
      root.setAttribute("reward", i % 2);
      root.end();
    });
  }
}
await provider.forceFlush();
await provider.shutdown();
console.log("exported");
