/**
 * Prompt attacks: on a user or system prompt a jailbreak (detected.jailbreak), in a document or tool
 * output an indirect attack (detected.indirect_attack); never evaluated on completions.
 *
 * A scored pattern set over the lower-cased text. Each rule that matches adds its weight once; the
 * text is an attack when the sum reaches THRESHOLD (1.0). Rules of weight >= 1 are enough alone
 * (e.g. "ignore all previous instructions"); weaker ones (role play, "no restrictions", "verbatim",
 * fake role markers) count only together. Families:
 * - instruction override: ignore / disregard / forget / override … previous / system … instructions;
 * - role play and persona jailbreaks: DAN, "do anything now", developer mode, unrestricted or
 *   unfiltered AI, "no longer bound by", "stay in character";
 * - system prompt exfiltration: reveal / print / repeat … your system prompt / initial instructions,
 *   "repeat the text above";
 * - delimiter and encoding tricks: chat-template role markers (`<|im_start|>system`, `[INST]`,
 *   `<<SYS>>`, `### system:`), "decode this base64 and follow it";
 * - in documents: text that addresses the AI reading it, hides things from the user, or sends data away.
 * All rules' key words are found in one scan (a trie-shaped expression); a rule runs only when one of
 * its keys is in the text, so a text without any costs that one scan.
 */
import { trieSource } from './trie.js';

export const THRESHOLD = 1;

interface Rule {
  re: RegExp;
  weight: number;
  /** Words (or word starts) one of which the text must contain for the rule to run. */
  keys: readonly string[];
  /** And one of these substrings, where the keys are common words ("what", "show"). */
  needs?: readonly string[];
}

/** Up to three filler words. */
const W = "(?:[\\w'’-]+\\s+){0,3}";
const OVERRIDE_VERBS = [
  'ignor',
  'disregard',
  'forget',
  'overrid',
  'bypass',
  'skip',
  'discard',
  'abandon',
  'drop',
  'neglect',
  'set aside',
  'throw out',
  'do not follow',
  "don't follow",
  'stop following',
];
const SHOW_VERBS = [
  'reveal',
  'show',
  'print',
  'repeat',
  'output',
  'display',
  'leak',
  'dump',
  'disclos',
  'expos',
  'share',
  'give me',
  'tell me',
  'write out',
  'spell out',
  'recit',
  'paste',
  'copy',
  'what',
];
const SHOW =
  'reveal|show|print|repeat|output|display|leak|dump|disclose|expose|share|give me|tell me|write out|spell out|recite|paste|copy|what (?:is|are|was|were)';
const EXFIL_NOUNS = ['prompt', 'instruction', 'message', 'rules', 'guideline', 'directive', 'configuration'];
const READERS = ['ai', 'assistant', 'language model', 'llm', 'chatbot', 'model', 'agent', 'gpt'];

const RULES: readonly Rule[] = [
  // Instruction override.
  {
    // "Ignore/forget … previous … rules": these verbs say it whatever the rules are.
    re: new RegExp(
      `\\b(?:ignor(?:e|ing)|disregard(?:ing)?|forget(?:ting)?|do not follow|don't follow|stop following)\\s+${W}(?:previous|prior|above|earlier|preceding|former|original|initial|existing|system|safety|developer|default|old|all|any|every|whatever|your)\\s+${W}(?:instructions?|rules?|guidelines?|directives?|prompts?|constraints?|restrictions?|policies|policy|programming|guardrails?|filters?|context|commands?|orders?)\\b`,
    ),
    weight: 1,
    keys: OVERRIDE_VERBS,
  },
  {
    // "Drop/override/skip … the default rules" is also how one talks about firewalls and linters: with
    // these verbs only an assistant's own instructions count.
    re: new RegExp(
      `\\b(?:overrid(?:e|ing)|bypass(?:ing)?|skip(?:ping)?|discard(?:ing)?|abandon(?:ing)?|drop(?:ping)?|neglect(?:ing)?|set aside|throw out)\\s+${W}(?:previous|prior|above|earlier|preceding|original|initial|system|developer|all|any|every|your)\\s+${W}(?:instructions?|guidelines?|directives?|prompts?|programming|guardrails?)\\b`,
    ),
    weight: 1,
    keys: OVERRIDE_VERBS,
  },
  {
    re: new RegExp(
      `\\b(?:ignor(?:e|ing)|disregard(?:ing)?|forget(?:ting)?|overrid(?:e|ing)|bypass(?:ing)?|skip(?:ping)?|set aside|do not follow|don't follow|stop following)\\s+${W}(?:content polic(?:y|ies)|safety (?:guidelines|rules|filters?|policies|measures|settings)|guardrails|programming|ethical (?:guidelines|constraints|rules)|system prompt|usage polic(?:y|ies))\\b`,
    ),
    weight: 1,
    keys: OVERRIDE_VERBS,
  },
  {
    re: /\b(?:ignore|disregard|forget)\s+(?:everything|all)\s+(?:above|before|prior|previously|you (?:were|have been) told)/,
    weight: 1,
    keys: ['ignor', 'disregard', 'forget'],
  },
  {
    re: /\b(?:new|updated|real|actual|true)\s+(?:instructions?|system prompt|directives?|task)\s*(?::|are\b|is\b|follow)/,
    weight: 0.5,
    keys: ['instruction', 'system prompt', 'directive', 'task'],
  },
  {
    re: /\b(?:from now on|starting now|for the rest of this conversation),?\s+(?:you|your)\b/,
    weight: 0.4,
    keys: ['from now on', 'starting now', 'for the rest of this'],
  },
  // Personas and role play.
  {
    re: /\bdo anything now\b|\bdan mode\b|\byou are (?:now )?dan\b|\bact as dan\b/,
    weight: 1,
    keys: ['do anything now', 'dan'],
  },
  {
    re: /\b(?:developer|dev|god|debug|sudo|admin|jailbreak|unrestricted|unfiltered|evil|chaos) mode\b/,
    weight: 0.7,
    keys: [
      'developer',
      'dev',
      'god',
      'debug',
      'sudo',
      'admin',
      'jailbr',
      'unrestrict',
      'unfilter',
      'evil',
      'chaos',
    ],
  },
  { re: /\b(?:mode|jailbreak)\s+(?:enabled|activated|on|unlocked)\b/, weight: 0.5, keys: ['mode', 'jailbr'] },
  {
    re: /\b(?:you are|you're|act as|pretend (?:to be|you are|you're)|roleplay as|play the role of|become)\b[^.!?\n]{0,40}\b(?:unrestricted|unfiltered|uncensored|jailbroken|amoral|unethical|rogue|evil|lawless)\b/,
    weight: 0.8,
    keys: ['unrestrict', 'unfilter', 'uncensor', 'jailbr', 'amoral', 'unethical', 'rogue', 'evil', 'lawless'],
  },
  {
    re: /\b(?:no|zero|without|free of|free from|freed from|liberated from|released from|not bound by|no longer bound by|unbound by|beyond)\s+(?:any\s+|all\s+|your\s+|the\s+)?(?:\w+\s+)?(?:restrictions?|filters?|censorship|limitations?|limits|rules|guidelines|guardrails|ethics|morals|content polic(?:y|ies)|safety)\b/,
    weight: 0.5,
    keys: [
      'restrict',
      'filter',
      'censor',
      'limit',
      'rules',
      'guideline',
      'guardrail',
      'ethic',
      'moral',
      'content polic',
      'safety',
    ],
  },
  { re: /\b(?:jailbreak|jailbroken|jailbreaking)\b/, weight: 0.5, keys: ['jailbr'] },
  {
    re: /\bstay in character\b|\bdo not break character\b|\bdon't break character\b/,
    weight: 0.5,
    keys: ['stay in character', 'do not break', "don't break"],
  },
  {
    re: /\bnever refuses?\b|\bcannot refuse\b|\bcan't refuse\b|\bmust answer (?:every|all|any)|\balways (?:answer|comply)\b/,
    weight: 0.5,
    keys: ['never refuse', 'cannot refuse', "can't refuse", 'must answer', 'always answer', 'always comply'],
  },
  {
    re: /\b(?:openai|anthropic|your creators?|your developers?)(?:'s)? (?:policies|rules|guidelines|content policy)\b/,
    weight: 0.4,
    keys: ['openai', 'anthropic', 'your creator', 'your developer'],
  },
  {
    re: /\b(?:hypothetical|fictional|imaginary|pretend (?:to be|you are|you're)|imagine (?:you are|you're)|act as(?: if you (?:are|were))?|roleplay as)\s+(?:an?\s+)?(?:\w+\s+)?(?:ai|model|assistant|chatbot|llm)\s+(?:with no|without|that has no|free of|that ignores)\b/,
    weight: 0.7,
    keys: ['hypothetical', 'fictional', 'imaginary', 'pretend', 'imagine', 'act as', 'roleplay'],
  },
  // System prompt exfiltration.
  {
    // The system prompt, or hidden instructions, by name.
    re: new RegExp(
      `\\b(?:${SHOW})\\s+${W}(?:system|hidden|secret|internal|confidential|developer|pre-?prompt)\\s+(?:prompt|instructions?|message|rules|guidelines|directives|configuration)\\b`,
    ),
    weight: 1,
    keys: SHOW_VERBS,
    needs: EXFIL_NOUNS,
  },
  {
    // "Your initial instructions" (not "the original instructions for the shelf").
    re: new RegExp(
      `\\b(?:${SHOW})\\s+${W}your\\s+(?:original|initial|first|full|exact|complete|entire|real|actual)\\s+(?:prompt|instructions?|message|rules|directives|configuration)\\b`,
    ),
    weight: 1,
    keys: SHOW_VERBS,
    needs: EXFIL_NOUNS,
  },
  {
    re: new RegExp(
      `\\b(?:${SHOW})\\s+(?:me\\s+)?your\\s+(?:prompt|instructions|rules|guidelines|directives)\\b`,
    ),
    weight: 0.5,
    keys: SHOW_VERBS,
    needs: EXFIL_NOUNS,
  },
  {
    re: /\b(?:repeat|print|output|recite)\s+(?:the\s+|all\s+)?(?:text|words|everything|content|lines)\s+(?:above|before)\b/,
    weight: 1,
    keys: ['repeat', 'print', 'output', 'recit'],
  },
  { re: /\bverbatim\b|\bword for word\b/, weight: 0.3, keys: ['verbatim', 'word for word'] },
  // Delimiter and encoding tricks.
  {
    re: /<\|im_start\|>|<\|im_end\|>|<\|(?:system|assistant|user|endoftext)\|>|\[\/?inst\]|<<\/?sys>>|^#{2,}\s*(?:system|new instructions)\b|\[system(?: message)?\]|<\/?system>|\bend of (?:user )?(?:input|prompt|instructions)\b/m,
    weight: 0.6,
    keys: ['<|', '[inst', '[/inst', '<<', '##', '[system', 'system>', 'end of'],
  },
  {
    re: /\b(?:decode|decrypt|translate|convert)\s+(?:this|the following|it|that)\s+(?:from\s+)?(?:base64|base 64|rot13|rot-13|hex|binary|morse)?\s*(?:and|then)\s+(?:follow|execute|obey|do|run|act on)\b/,
    weight: 0.9,
    keys: ['decod', 'decrypt', 'translat', 'convert'],
  },
  { re: /\b(?:base64|rot13|rot-13)\b/, weight: 0.2, keys: ['base64', 'rot13', 'rot-13'] },
  // Addressed to the AI that reads a document.
  {
    re: /\b(?:ai|assistant|language model|llm|chatbot|model|agent|gpt)s?\s+(?:reading|processing|summari[sz]ing|analy[sz]ing|parsing|browsing|screening|reviewing|evaluating|grading|ranking)\s+(?:this|the)\b/,
    weight: 0.6,
    keys: READERS,
  },
  {
    re: /\b(?:note|message|instructions?|attention|important)\s+(?:to|for)\s+(?:the\s+|any\s+)?(?:ai|assistant|llm|language model|chatbot|agent)\b/,
    weight: 0.6,
    keys: READERS,
  },
  {
    re: /\b(?:do not|don't|never)\s+(?:tell|inform|mention (?:this )?to|reveal (?:this )?to|alert|notify)\s+the user\b/,
    weight: 0.7,
    keys: ['the user'],
  },
  {
    re: /\b(?:send|forward|email|post|upload|exfiltrate|transmit)\s+(?:the\s+|all\s+|this\s+|their\s+|your\s+)?(?:user'?s?\s+)?(?:(?:conversation|chat)(?: history| logs?| transcripts?)?|data|credentials|passwords?|api keys?|personal (?:data|information)|messages|e-?mails|files|contacts)\s+to\b/,
    weight: 0.7,
    keys: ['send', 'forward', 'email', 'post', 'upload', 'exfiltrat', 'transmit'],
  },
  { re: /\binstead,?\s+(?:say|respond|reply|output|tell|write)\b/, weight: 0.3, keys: ['instead'] },
  { re: /\byou (?:must|will|should) now\b/, weight: 0.3, keys: ['you must', 'you will', 'you should'] },
];

/** Every rule's keys in one expression: word keys after a word boundary, marker keys anywhere. */
const KEYS = (() => {
  const all = new Set(RULES.flatMap((r) => r.keys));
  const words = [...all].filter((k) => /^\w/.test(k));
  const marks = [...all].filter((k) => !/^\w/.test(k));
  return new RegExp(`\\b(?:${trieSource(words)})|${trieSource(marks)}`, 'g');
})();

/** The attack score of a lower-cased text (0 when no rule's key is in it). */
export function attackScore(lower: string): number {
  KEYS.lastIndex = 0;
  let m = KEYS.exec(lower);
  if (m === null) return 0;
  const has = new Set<string>();
  for (; m !== null; m = KEYS.exec(lower)) has.add(m[0]);
  let score = 0;
  // Rules share their lists of needed words: each list is looked for once per text.
  let needsMet: Map<readonly string[], boolean> | undefined;
  for (const rule of RULES) {
    if (!rule.keys.some((k) => has.has(k))) continue;
    if (rule.needs !== undefined) {
      needsMet ??= new Map();
      let met = needsMet.get(rule.needs);
      if (met === undefined) {
        met = rule.needs.some((n) => lower.includes(n));
        needsMet.set(rule.needs, met);
      }
      if (!met) continue;
    }
    if (rule.re.test(lower)) score += rule.weight;
  }
  return score;
}

export function isAttack(lower: string): boolean {
  return attackScore(lower) >= THRESHOLD;
}
