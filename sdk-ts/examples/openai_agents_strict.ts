import { Agent, run, setTraceProcessors, tool } from "@openai/agents-core"; // or "@openai/agents"
import { OpenAIAgentsRecorder } from "@laneledger/sdk/openai-agents";
import { z } from "zod";

const recorder = await OpenAIAgentsRecorder.connect("nats://127.0.0.1:4222", { tenant: "acme", strictTools: true });
setTraceProcessors([recorder.processor]); // every trace and span, recorded (best effort)
const sendEmail = tool({
  name: "send_email",
  description: "Sends an email",
  parameters: z.object({ to: z.string(), body: z.string() }),
  inputGuardrails: [recorder.strictToolGuardrail], // runs only once its attempt.requested has committed
  execute: async ({ to }) => `sent to ${to}`,
});
await run(new Agent({ name: "mailer", instructions: "Send what you are asked to.", tools: [sendEmail] }), "Email Ada the minutes.");
await recorder.close();
