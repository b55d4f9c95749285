/**
 * Settling a call from the console: an operator names the outcome of a pending or
 * indeterminate call, confirms it on a second page, and the kernel journals it with the
 * operator's words and who settled it, from where, when.
 */
import type { Logger } from "../../common/src/logger";
import type { ConsoleBackend } from "./console-backend";
import { ConsoleRefusal, type Form } from "./console-http";
import { callsView } from "./console-views";
import type { SafeHtml } from "./html";
import { errorPage, notice, settleConfirmPage, settledPage, stateName, type PageContext } from "./pages";
import type { Session } from "./sessions";

/** CompleteCall keeps at most 4 KiB of detail; the console's own note takes the rest. */
const MAX_DETAIL_CHARS = 2000;

/** A page to answer with: the server lays it out for the session. */
export interface PageAnswer {
  status: number;
  title: string;
  section: PageContext["section"];
  body: SafeHtml;
  headers?: Record<string, string>;
}

/** POST /calls/settle (the confirmation page) and /calls/settle/confirm (the settlement). */
export async function settleCall(b: ConsoleBackend, path: string, form: Form, session: Session, logger: Logger): Promise<PageAnswer> {
  const callId = form["call_id"] ?? "";
  const outcome = form["outcome"];
  const detail = (form["detail"] ?? "").trim().slice(0, MAX_DETAIL_CHARS);
  const callsWith = async (status: number, reason: string, message: string): Promise<PageAnswer> => ({
    status,
    title: "Calls",
    section: "calls",
    body: await callsView(b, session.csrfToken, notice("error", message)),
    headers: { "X-Keycap-Reason": reason },
  });
  if (outcome !== "succeeded" && outcome !== "failed") return callsWith(400, "OUTCOME_REQUIRED", "Choose an outcome: succeeded or failed.");
  const call = (await b.indeterminateCalls()).find((c) => c.callId === callId) ?? (await b.pendingCalls()).find((c) => c.callId === callId);
  if (path === "/calls/settle") {
    if (!call) return callsWith(404, "CALL_NOT_FOUND", `No open call ${callId}: it may be settled already.`);
    const recorded = settlementDetail(detail, session, new Date());
    return { status: 200, title: "Confirm settlement", section: "calls", body: settleConfirmPage(call, outcome, detail, recorded, session.csrfToken) };
  }
  if (form["confirm"] !== "yes") throw new ConsoleRefusal(400, "CONFIRMATION_REQUIRED", "Settling a call needs the confirmation step.");
  const at = new Date();
  const result = await b.completeCall(callId, outcome, settlementDetail(detail, session, at));
  const settled = result.call;
  logger.info(
    {
      callId,
      toolId: settled?.toolId,
      outcome,
      operator: session.operator,
      peer: session.peer,
      alreadyCompleted: result.alreadyCompleted,
      wasState: call ? stateName(call.state) : "",
    },
    "console settled a call",
  );
  if (!settled) return { status: 502, title: "Calls", section: "calls", body: errorPage("The kernel answered without the call.") };
  return { status: 200, title: "Call settled", section: "calls", body: settledPage(settled, result.alreadyCompleted, describeOperator(session), at) };
}

function describeOperator(s: Session): string {
  return `${s.operator} (keycap console, from ${s.peer || "unknown address"})`;
}

/** What the kernel journals as the call's outcome detail: the operator's words, then who and when. */
export function settlementDetail(detail: string, s: Session, at: Date): string {
  const who = `settled by ${describeOperator(s)} at ${at.toISOString()}`;
  return detail ? `${detail} — ${who}` : who;
}
