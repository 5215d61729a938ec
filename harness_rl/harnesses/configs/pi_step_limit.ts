// harness-rl: a hard step limit for pi, which has none of its own.
// After HARNESS_RL_MAX_TURNS turns (one model call plus the tools it asked for), if the agent would go on
// (the last turn ran tools, so another model call follows), print a marker line on stderr and abort the run;
// pi then exits 1 with "Request was aborted." and the adapter reports limits_exceeded.
export default function (pi: any) {
  const limit = Number.parseInt(process.env.HARNESS_RL_MAX_TURNS ?? "", 10);
  if (!Number.isFinite(limit) || limit <= 0) return;
  let turns = 0;
  pi.on("turn_end", async (event: any, ctx: any) => {
    turns += 1;
    const continues = Array.isArray(event.toolResults) && event.toolResults.length > 0;
    if (turns >= limit && continues) {
      process.stderr.write(`harness-rl: step limit reached after ${turns} model calls\n`);
      ctx.abort();
    }
  });
}
