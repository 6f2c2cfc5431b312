/**
 * The local firewall's guidance values (the contract's "Local guidance"; firewall.md §3):
 * what a check saw and advises, and why it refused or withheld. A leaf: `errors.ts`
 * (`FirewallSendError` carries a refusal and a `CheckedGuidance`) and `values.ts` both
 * import it, so they never import each other; re-exported from `values.ts`. The Python
 * contract's `guidance.py` is the same leaf.
 */

/** Why the local firewall refused a send or withheld text. */
export type FirewallRefusal =
  | "forbidden-recipient"
  | "content-blocked"
  | "rate-limited"
  | "middleware-unavailable";

/** What a rule expects the model to do about its subjects. */
export type Expectation = "required" | "permitted" | "wait" | "none";

/** One text a firewall check covered. */
export interface GuidanceSubject {
  readonly id: string;
  readonly sender: string;
  readonly recipients: readonly string[];
  readonly text: string;
}

/** An instruction stating an expectation about some subjects. */
export interface ExpectationInstruction {
  readonly middlewareId: string;
  readonly ruleId: string;
  readonly expectation: Expectation;
  readonly subjects: readonly string[];
  readonly instruction: string;
}

/** An instruction reporting a middleware's judgement (a classifier). */
export interface UncertainInstruction {
  readonly middlewareId: string;
  readonly ruleId: string;
  readonly uncertain: { readonly choice: string; readonly probability: number };
  readonly instruction: string;
}

/** One of the two instruction shapes (`"expectation" in i` tells them apart). */
export type Instruction = ExpectationInstruction | UncertainInstruction;

/** The outcome of one firewall check that admitted what it checked. */
export interface CheckedGuidance {
  readonly checkId: string;
  readonly subjects: readonly GuidanceSubject[];
  readonly instructions: readonly Instruction[];
}

/** The guidance on one member's answer in a collective result. */
export type MemberGuidance = CheckedGuidance & {
  /** `agent:<AgentName>` (an `AgentAddress`). */
  readonly member: string;
};

/** The guidance of a `collectiveResult` delivery. */
export interface CollectiveGuidance {
  readonly question?: CheckedGuidance;
  readonly answers: readonly MemberGuidance[];
}

/** What the local firewall says about one delivery (`"checkId" in g` is the checked form). */
export type LocalGuidance = CheckedGuidance | CollectiveGuidance;

/** Text the local firewall withheld from the runtime, never peer content. */
export interface Withheld {
  readonly kind: "withheld";
  readonly checkId: string;
  readonly reason: FirewallRefusal;
}
