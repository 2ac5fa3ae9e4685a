/**
 * The harm categories' data (harm.ts runs it): weighted words, the contexts that make a word harmless,
 * and the phrase patterns that set a minimum severity (intent, targets, instructions). All lower case;
 * patterns run on the lower-cased text with harmless contexts blanked out.
 *
 * Word weights: 1 for a word that is about the category whatever the context ("murder", "suicide",
 * "porn"), less for words that are often used otherwise ("shot", "die", "sexy"), 0 for a word that only
 * lets the category's patterns run (group names, "myself"). Keys list the forms, separated by `|`.
 */
import type { HarmCategory, Severity } from '../categories.js';

export interface HarmPattern {
  re: RegExp;
  /** Lexicon words of which one must be in the text for `re` to run. */
  keys: readonly string[];
  /** The least severity a text matching it gets. */
  severity: Exclude<Severity, 'safe'>;
}

export interface HarmRules {
  /** "form|form|a phrase": weight. */
  words: Readonly<Record<string, number>>;
  patterns: readonly HarmPattern[];
}

/** Groups that hate speech targets (protected characteristics), as they follow "all", "the", "those". */
export const GROUPS =
  '(?:immigrants?|migrants?|refugees?|asylum seekers?|foreigners?|muslims?|islam|jews?|jewish people|christians?|catholics?|hindus?|sikhs?|buddhists?|atheists?|blacks?|black people|whites?|white people|asians?|chinese|japanese|koreans?|indians?|pakistanis?|arabs?|africans?|mexicans?|latinos?|latinas?|hispanics?|gypsies|roma|gays?|gay people|gay men|lesbians?|homosexuals?|bisexuals?|trans people|transgender people|trans women|trans men|transgenders?|queers?|lgbt(?:q\\+?)? people|women|girls|females?|disabled people|the disabled|autistic people|[a-z]+ (?:people|folks)|(?:those|these) people)';

const G = GROUPS;
/** The lexicon words that name a group (they only let the hate patterns run). */
const GROUP_KEYS =
  'immigrants|immigrant|migrants|migrant|refugees|refugee|foreigners|muslims|muslim|islam|jews|jew|jewish|christians|catholics|hindus|sikhs|buddhists|atheists|blacks|whites|asians|chinese|japanese|koreans|indians|pakistanis|arabs|africans|mexicans|latinos|latinas|hispanics|gypsies|roma|gays|gay|lesbians|lesbian|homosexuals|homosexual|bisexuals|trans|transgender|transgenders|queers|queer|lgbt|lgbtq|women|girls|females|disabled|autistic|people'.split(
    '|',
  );
const WEAPON_KEYS = [
  'bomb',
  'bombs',
  'pipe bomb',
  'pipe bombs',
  'explosive',
  'explosives',
  'ied',
  'molotov',
  'grenade',
  'sarin',
  'ricin',
  'anthrax',
  'napalm',
  'thermite',
  'nerve agent',
  'nerve agents',
  'bioweapon',
  'bioweapons',
  'chemical weapon',
  'chemical weapons',
  'silencer',
  'silencers',
  'ghost gun',
  'ghost guns',
  'gun',
  'guns',
];
const MINOR_KEYS = [
  'child',
  'children',
  'kid',
  'kids',
  'minor',
  'minors',
  'underage',
  'preteen',
  'schoolgirl',
  'schoolboy',
  'year old',
  'year-old',
  'year olds',
  'year-olds',
  'little girl',
  'little boy',
  'teen',
  'teens',
  'teenage',
];
/** Up to N filler words. */
const w = (n: number) => `(?:[\\w'’-]+\\s+){0,${n}}`;
const re = (source: string) => new RegExp(source);

/** Who "how to kill …" is about: people, not "a process" or "a basketball". */
const VICTIM =
  '(?:someone|somebody|people|(?:a |the )?(?:person|human|man|woman|child|kid|baby|wife|husband|girlfriend|boyfriend|neighbou?r|boss|teacher|cop|police officer|president|family|witness|stranger|rival|partner)\\b|(?:my|your|his|her|their) (?!self\\b|own\\b)\\w+|him\\b|her\\b|them\\b|\\w+ without (?:getting caught|being caught|leaving (?:a )?(?:trace|evidence)))';
/** Verbs of serious violence against a person. */
const VERBS =
  'kill|murder|stab|shoot|strangle|choke|torture|behead|rape|slaughter|maim|mutilate|burn|beat|hurt|poison';
/** Whom a threat is against (not "my life", "my time": those are the speaker's own). */
const PERSON =
  '(?:you|him|her|them|(?:your|his|my) (?!life\\b|own\\b|days\\b|time\\b|career\\b|pain\\b)\\w+|everyone|everybody|people|someone|somebody)';

export const HARM: Readonly<Record<HarmCategory, HarmRules>> = {
  violence: {
    words: {
      'kill|kills|killed|killing': 1,
      'killer|killers': 0.7,
      'murder|murders|murdered|murdering|murderer|murderous': 1,
      'stab|stabs|stabbed|stabbing': 1,
      'shoot|shoots|shooting|shooter': 0.8,
      shot: 0.5,
      'gun|guns|handgun|pistol|rifle|shotgun|firearm|firearms|ammo|ammunition': 0.7,
      'knife|knives|machete': 0.6,
      'bomb|bombs|bombing|bomber|explosive|explosives|grenade|detonate|detonator|ied|molotov': 1,
      'blood|bloody|bleeding|bled': 0.6,
      'slaughter|slaughtered|massacre|massacred|genocide': 1.2,
      'assault|assaulted|attack|attacked|attacking': 0.5,
      'torture|tortured|torturing': 1.2,
      'strangle|strangled|strangling|choke|choked|choking|suffocate': 0.9,
      'behead|beheaded|beheading|decapitate|decapitated|dismember|dismembered|mutilate|mutilated|maim': 1.5,
      'corpse|corpses|gore|gory|guts|entrails': 0.8,
      'dead|death|die|dies|died|dying': 0.5,
      'violence|violent|brutal|brutally': 0.6,
      'weapon|weapons': 0.6,
      'hurt|hurts|wound|wounded|injure|injured': 0.4,
      'punch|punched|beat|beaten|beating|kick|kicked|smash|smashed': 0.3,
      'hostage|hostages|kidnap|kidnapped|kidnapping|terrorist|terrorists|terrorism': 1,
      'war|wars|battle|battles|combat|soldiers|fight|fights|fighting|knockout|boxer|boxing|robbery|robbed|armed': 0.5,
      'slay|slays|slayed|slain|slew|exterminate|exterminated|extermination|eradicate|lynch|lynched|butchered': 1,
      'execute|executed|execution': 0.4,
      'poison|poisoned|poisoning': 0.7,
      'rape|raped': 1,
      'burn|burned|arson': 0.3,
      sniper: 0.7,
      'ripped|tore|gouged|sliced|hacked|slit|slashed|crushed|bleed': 0.3,
      'blow|end|bury|body|next': 0,
      'sarin|ricin|anthrax|napalm|thermite|nerve agent|nerve agents|bioweapon|bioweapons|chemical weapon|chemical weapons|silencer|silencers|ghost gun|ghost guns|pipe bomb|pipe bombs': 1,
    },
    patterns: [
      // Someone's intent to hurt a person ("a man who wants to kill his neighbour").
      {
        re: re(
          `\\b(?:he|she|they|who|someone|somebody|a man|a woman|people)(?:'s| is| are|'re)?\\s+(?:wants? to|wanted to|plans? to|planned to|intends? to|is going to|are going to|was going to|will|threatens? to|threatened to|tried to|tries to)\\s+(?:${VERBS})(?:\\s+and\\s+(?:${VERBS}))?\\s+${PERSON}`,
        ),
        severity: 'medium',
        keys: ['kill', 'murder', 'stab', 'shoot', 'strangle', 'choke', 'hurt', 'beat', 'torture', 'poison'],
      },
      // Several different violent acts named together ("they kill and stab"): described violence.
      {
        re: re(`\\b(?:${VERBS})(?:s|ed|ing)?\\s+(?:and|then|or|,)\\s+(?:${VERBS})(?:s|ed|ing)?\\b`),
        severity: 'medium',
        keys: [
          'kill',
          'kills',
          'killed',
          'killing',
          'murder',
          'murders',
          'murdered',
          'stab',
          'stabs',
          'stabbed',
          'stabbing',
          'torture',
          'tortured',
          'strangle',
          'strangled',
          'shoot',
          'shoots',
          'shooting',
          'behead',
          'rape',
        ],
      },
      // Threats: the speaker will hurt the addressee or someone named.
      {
        re: re(
          `\\b(?:i|we)(?:'m| am|'ll| will|'re| are)?\\s+(?:going to|gonna|will|about to|want to|wanna|plan to|intend to|swear i'll|swear i will)\\s+${w(4)}(?:kill|murder|stab|shoot|strangle|choke|hurt|beat|torture|slit|poison|end|bury|hunt|burn)\\s+${PERSON}`,
        ),
        severity: 'medium',
        keys: [
          'kill',
          'murder',
          'stab',
          'shoot',
          'strangle',
          'choke',
          'hurt',
          'beat',
          'torture',
          'slit',
          'poison',
          'end',
          'bury',
        ],
      },
      // The same threat without its subject, as a stream window may cut it ("… going to kill you").
      {
        re: /\b(?:going to|gonna|will|'ll|about to)\s+(?:kill|murder|stab|shoot|strangle|hurt|torture|slit|poison)\s+(?:you|u|ya|your (?:family|kids|wife|husband|mother|mom|dad))\b(?!\s+with (?:boredom|kindness|laughter))/,
        severity: 'medium',
        keys: ['kill', 'murder', 'stab', 'shoot', 'strangle', 'hurt', 'torture', 'slit', 'poison'],
      },
      {
        re: /\b(?:you(?:'re| are) (?:dead|going to die|gonna die)|you will die|you'll die|you(?:'re| are) next|i'll make you bleed|watch your back,? (?:or|because)|dead man walking)\b/,
        severity: 'medium',
        keys: ['dead', 'die', 'next', 'bleed'],
      },
      {
        re: re(
          `\\b(?:i hope|hope)\\s+(?:you|he|she|they)\\s+${w(1)}(?:die|dies|get killed|gets killed|get shot|gets shot|get stabbed|burn|bleed)\\b|\\b(?:deserved?|deserves) to (?:die|be (?:\\w+ )?(?:killed|shot|murdered|tortured|beaten|stabbed|hanged|burned|raped|executed))\\b`,
        ),
        severity: 'medium',
        keys: ['die', 'dies', 'killed', 'shot', 'stabbed', 'burn', 'bleed', 'murdered', 'tortured'],
      },
      // A threat with the means or the place: credible.
      {
        re: re(
          `\\b(?:i|we)(?:'m| am|'ll| will)?\\s+(?:going to|gonna|will)\\s+${w(2)}(?:kill|murder|stab|shoot|hurt)\\s+${PERSON}[^.!?]{0,80}(?:know where you live|your address|i have a (?:gun|knife|rifle)|my gun|tonight|tomorrow|at school|at work|your family|your kids)`,
        ),
        severity: 'high',
        keys: ['kill', 'murder', 'stab', 'shoot', 'hurt'],
      },
      // Instructions for weapons or killing.
      {
        re: re(
          `\\b(?:how (?:to|do i|can i|could i|would i|do you|does one)|ways? to|steps? to|instructions? (?:for|to|on)|guide (?:to|for)|recipe for|tutorial (?:on|for)|teach me to|show me how to|tell me how to)\\s+(?:${w(2)}(?:make|build|assemble|construct|create|cook|synthesi[sz]e|get|buy)\\s+)?${w(2)}(?:bombs?|pipe bombs?|explosives?|ied|molotov(?: cocktails?)?|grenades?|nerve agents?|sarin|ricin|anthrax|bioweapons?|chemical weapons?|ghost guns?|untraceable (?:guns?|firearms?)|silencers?|napalm|thermite)\\b`,
        ),
        severity: 'high',
        keys: WEAPON_KEYS,
      },
      {
        re: re(
          `\\b(?:how (?:to|do i|can i|could i|would i)|best way to|easiest way to|ways? to|teach me to|tell me how to)\\s+${w(2)}(?:kill|murder|poison|strangle|stab|shoot|torture|kidnap|dismember)\\s+${VICTIM}`,
        ),
        severity: 'high',
        keys: ['kill', 'murder', 'poison', 'strangle', 'stab', 'shoot', 'torture', 'kidnap', 'dismember'],
      },
      {
        re: /\b(?:get away with|hide the body|dispose of (?:a|the) body|untraceable poison)\b/,
        severity: 'high',
        keys: ['body', 'poison', 'murder', 'kill', 'killing'],
      },
      // Calls to kill a group (hate scores the same call as a call for removal).
      {
        re: re(
          `\\b${G}\\s+(?:should|must|need to|ought to|deserve to|have to)\\s+(?:all\\s+)?(?:be\\s+)?(?:die|killed|exterminated|gassed|shot|hanged|lynched|burned|burnt|slaughtered|executed)\\b`,
        ),
        severity: 'high',
        keys: ['die', 'killed', 'exterminated', 'shot', 'lynched', 'slaughtered', 'executed', 'burned'],
      },
      // Mass violence.
      {
        re: re(
          `\\b(?:shoot up|bomb|blow up|attack|massacre|kill (?:everyone|everybody|all the people) (?:at|in))\\s+(?:the |my |a |our |this )?(?:school|church|mosque|synagogue|temple|mall|concert|office|stadium|crowd|parade|subway|classroom|campus|hospital)\\b`,
        ),
        severity: 'high',
        keys: ['shoot', 'bomb', 'blow', 'attack', 'massacre', 'kill'],
      },
      // Sexual violence against someone.
      {
        re: /\b(?:rape[ds]?|raping|sexually assault(?:ed|ing|s)?|molest(?:ed|ing|s)?)\s+(?:her|him|them|me|us|you|a |an |the |his |my |their |\w+ (?:girl|boy|woman|man|child))/,
        keys: ['rape', 'raped', 'raping', 'molest', 'molested', 'molesting', 'assault', 'assaulted'],
        severity: 'medium',
      },
      // Killing many, described.
      {
        re: /\b(?:massacred|slaughtered|butchered|exterminated|executed|beheaded|gunned down|mowed down|murdered|killed)\s+(?:\w+\s+){0,2}(?:hundreds|thousands|dozens|scores|\d{2,}|all the|every)\b/,
        keys: [
          'massacred',
          'slaughtered',
          'butchered',
          'exterminated',
          'executed',
          'beheaded',
          'murdered',
          'killed',
        ],
        severity: 'medium',
      },
      // Calls to kill everyone of a kind.
      {
        re: /\b(?:kill|exterminate|slaughter|massacre|murder|eradicate|wipe out|gas|lynch|shoot)\s+(?:all|every|each)\s+(?:(?:the|of the|those|these)\s+)?[a-z]+/,
        keys: ['kill', 'exterminate', 'slaughter', 'massacre', 'murder', 'eradicate', 'lynch', 'shoot'],
        severity: 'high',
      },
      // Steps of making a weapon (a completion giving instructions).
      {
        re: /\b(?:first|then|next|step \d+|finally|now)\b,?[^.!?]{0,80}\b(?:pack|fill|attach|connect|wire|mix|seal|add|pour|insert)\b[^.!?]{0,60}\b(?:detonator|explosive|explosives|fuse|shrapnel|gunpowder|blasting cap|igniter|accelerant)\b|\b(?:acquire|get|buy|obtain)\s+(?:a |an |some )?(?:detonator|blasting cap|fuse|shrapnel|gunpowder)\b[^.!?]{0,20}\b(?:then|and)\b/,
        keys: ['explosive', 'explosives', 'bomb', 'detonator', 'detonate'],
        severity: 'high',
      },
      // Graphic description.
      {
        re: /\b(?:ripped|tore|gouged|sliced|hacked|cut|slit|slashed|smashed|crushed|stabbed) (?:out |open |off )?(?:his|her|their|the victim's|the man's|the woman's) (?:eyes|throat|guts|stomach|head|skull|face|fingers|limbs|skin|chest)\b|\bblood (?:sprayed|gushed|pooled|spattered)\b|\bbleed(?:ing)? out\b|\b(?:beaten|stabbed|burned|tortured) to death\b/,
        severity: 'medium',
        keys: [
          'ripped',
          'tore',
          'gouged',
          'sliced',
          'hacked',
          'cut',
          'slit',
          'slashed',
          'smashed',
          'crushed',
          'stabbed',
          'blood',
          'bleed',
          'bleeding',
          'beaten',
          'burned',
          'tortured',
        ],
      },
    ],
  },
  self_harm: {
    words: {
      'suicide|suicides|suicidal': 1,
      'self-harm|self harm|self-injury|self-harming': 1,
      'overdose|overdosed|overdosing': 0.8,
      'kill|killing': 0,
      myself: 0,
      'die|dying|dead|death': 0.2,
      'live|living|alive': 0,
      'cut|cutting|cuts': 0.1,
      'razor|razors|blade': 0.3,
      'pills|tablets': 0.2,
      'hang|hanging|noose': 0.3,
      'anorexia|anorexic|bulimia|bulimic|eating disorder|eating disorders': 1,
      'purge|purging|starve|starving': 0.5,
      'worthless|hopeless': 0.3,
      'end|ending': 0,
      'wrists|wrist': 0.5,
      'lethal|fatal': 0.3,
      'pro-ana|thinspiration|thinspo': 0.8,
      'jump|yourself|oneself|exist|born|better off|go on|disappear|wake up|painlessly|meds|paracetamol|tylenol|acetaminophen|ibuprofen|aspirin|insulin|antidepressants': 0,
    },
    patterns: [
      // First-person thoughts of dying or self-harm.
      {
        re: re(
          `\\bi(?:'ve| have)?\\s+${w(3)}(?:want|wish|wanna|would like|thinking about|think about|thought about|keep thinking about|plan|planning|considering)\\s+${w(1)}(?:to\\s+)?(?:die|dying|be dead|kill(?:ing)? myself|end(?:ing)? (?:it all|my life|it|everything)|not (?:be alive|wake up|exist|be here)|disappear forever|hurt(?:ing)? myself|cut(?:ting)? myself|suicide)\\b`,
        ),
        severity: 'medium',
        keys: [
          'die',
          'dying',
          'dead',
          'kill',
          'killing',
          'myself',
          'end',
          'ending',
          'exist',
          'wake up',
          'disappear',
          'suicide',
        ],
      },
      {
        re: /\b(?:i (?:don't|do not|no longer) want to (?:live|be alive|exist|wake up|go on)|better off dead|no (?:reason|point) (?:to|in) (?:live|living|going on|being alive)|can't go on (?:living|anymore)|wish i (?:was|were) dead|wish i had never been born|everyone would be better off without me)\b/,
        severity: 'medium',
        keys: ['live', 'living', 'alive', 'exist', 'wake up', 'go on', 'dead', 'born', 'better off'],
      },
      {
        re: /\bi(?:'ve| have)?\s+(?:been\s+)?(?:cut|cutting|hurt|hurting|burn|burning|harm|harming|starve|starving|punish|punishing)\s+myself\b/,
        severity: 'medium',
        keys: ['myself'],
      },
      // Intent, plan or method.
      {
        re: re(
          `\\b(?:i(?:'m| am)?\\s+(?:going to|gonna|about to)|i(?:'ll| will))\\s+${w(2)}(?:kill myself|end my (?:own )?life|end it all|commit suicide|take all (?:my|the|of my|of the) (?:pills|tablets|meds)|jump off|hang myself|overdose)\\b`,
        ),
        severity: 'high',
        keys: ['myself', 'end', 'suicide', 'pills', 'tablets', 'meds', 'jump', 'overdose'],
      },
      {
        re: re(
          `\\b(?:how (?:to|do i|can i|could i|would i|should i)|best way to|easiest way to|painless(?:ly)? way to|quickest way to|most effective way to|ways? to|methods? (?:to|of|for))\\s+${w(2)}(?:kill (?:myself|yourself|oneself)|commit suicide|end (?:my|your|one's) (?:own )?life|die painlessly|die quickly|overdose|hang (?:myself|yourself)|slit (?:my|your) wrists|cut (?:myself|my wrists|yourself) (?:deep|deeper))\\b`,
        ),
        severity: 'high',
        keys: [
          'myself',
          'yourself',
          'oneself',
          'suicide',
          'end',
          'painlessly',
          'die',
          'overdose',
          'wrists',
          'hang',
        ],
      },
      {
        re: re(
          `\\b(?:how many|how much|what dose of|what amount of|which)\\s+${w(3)}(?:pills|tablets|paracetamol|tylenol|acetaminophen|ibuprofen|aspirin|sleeping pills|insulin|antidepressants|meds)\\s+${w(5)}(?:to die|to kill (?:me|myself|you|yourself)|is lethal|is fatal|would be lethal|would be fatal|would kill|to overdose|for an overdose|to not wake up)`,
        ),
        severity: 'high',
        keys: [
          'pills',
          'tablets',
          'paracetamol',
          'tylenol',
          'acetaminophen',
          'ibuprofen',
          'aspirin',
          'insulin',
          'antidepressants',
          'meds',
        ],
      },
      {
        re: /\b(?:mix|take|use|buy|swallow|drink|inject|combine|jump from|jump off)\b[^.!?]{0,40}\bto (?:kill myself|end my (?:own )?life|die|commit suicide|overdose|not wake up)\b|\btake (?:all|\d+|a (?:whole|full) (?:bottle|pack|box)) (?:of )?(?:the |your |my )?(?:pills|tablets|meds|sleeping pills)\b[^.!?]{0,60}\b(?:not wake up|never wake up|won't wake up|will not wake up|die|dead|end it)/,
        keys: ['myself', 'suicide', 'end', 'die', 'overdose', 'wake up', 'dead', 'pills', 'tablets', 'meds'],
        severity: 'high',
      },
      // Urging someone to harm themself.
      {
        re: /\b(?:you should|you could|just|go|why don't you)\s+(?:\w+\s+)?(?:kill yourself|end your (?:own )?life|cut yourself|hang yourself|starve yourself)\b/,
        severity: 'medium',
        keys: ['yourself', 'end'],
      },
      {
        re: /\b(?:cutting|hurting|burning|starving|harming) yourself (?:is|can be) (?:a |the )?(?:good|great|best|only|easy) (?:way|answer|thing)\b|\b(?:cut|press) (?:harder|deeper)\b[^.!?]{0,60}\b(?:scars|cuts|wrists?|blood)\b/,
        severity: 'high',
        keys: ['yourself', 'cut', 'cutting', 'cuts', 'wrists', 'wrist'],
      },
      {
        re: /\b(?:suicide|self-harm|self harm) (?:methods?|techniques?|instructions?|tips)\b/,
        severity: 'high',
        keys: ['suicide', 'self-harm', 'self harm'],
      },
      {
        re: /\b(?:pro-ana|thinspiration|thinspo)\b|\btips to (?:starve|stop eating|purge)\b/,
        severity: 'medium',
        keys: ['pro-ana', 'thinspiration', 'thinspo', 'starve', 'purge'],
      },
    ],
  },
  sexual: {
    words: {
      'sex|sexual|sexually': 1,
      'sexy|seductive|seduce|seduced': 0.7,
      'nude|nudes|naked|undressed|undressing': 0.8,
      'porn|porno|pornography|pornographic|xxx|nsfw': 1.5,
      'erotic|erotica': 1.2,
      'orgasm|orgasms|climax|climaxed': 1.2,
      intercourse: 1,
      'penis|vagina|vulva|clitoris|clit|genitals|genitalia|testicles': 1,
      'breasts|nipples|nipple': 0.8,
      'masturbate|masturbated|masturbating|masturbation': 1.5,
      'blowjob|handjob|fellatio|cunnilingus': 2,
      'horny|aroused|arousal|lust|lustful': 0.8,
      'lingerie|thong': 0.5,
      'stripper|strippers|striptease': 0.7,
      'fetish|bdsm|bondage|kinky|dominatrix': 1,
      'dildo|dildos|vibrator': 1.2,
      'cum|cumming|ejaculate|ejaculated|semen': 1.5,
      'cock|cocks|pussy|tits|boobs|dick': 1.2,
      anal: 1,
      'threesome|orgy': 1.5,
      'hooker|hookers|prostitute|prostitutes|prostitution|escort': 0.6,
      'kiss|kissed|kissing': 0.15,
      'moan|moaned|moaning|thrust|thrusting': 0.7,
      'rape|raped|raping|molest|molested|molesting': 1.2,
      'year old|year-old|year olds|year-olds|little girl|little boy|bed|bedroom|explicit|steamy|smutty|x-rated|dirty|fuck|fucked|fucking|screw|screwed|suck|sucked|sucking|lick|licked|licking|fondle|fondled|groped|forced|forcing|pinned|pics': 0,
      'child|children|kid|kids|minor|minors|underage|teen|teens|teenage|schoolgirl|schoolboy|preteen': 0,
    },
    patterns: [
      {
        re: /\b(?:fuck(?:ed|ing|s)?|screw(?:ed|ing)?|had sex with|have sex with|having sex with|suck(?:ed|ing|s)?|lick(?:ed|ing|s)?|fondl(?:e|ed|ing)|grop(?:e|ed|ing)|rubb(?:ed|ing))\s+(?:[\w'’-]+\s+){0,3}(?:pussy|cock|dick|penis|vagina|clit|breasts|tits|nipples|ass|her|him|me)\b(?=[^.!?]{0,60}\b(?:hard|deep|wet|naked|moan\w*|cum\w*|orgasm\w*|bed|until|all night)\b)/,
        severity: 'medium',
        keys: [
          'fuck',
          'fucked',
          'fucking',
          'screw',
          'screwed',
          'sex',
          'suck',
          'sucked',
          'sucking',
          'lick',
          'licked',
          'licking',
          'fondle',
          'fondled',
          'groped',
        ],
      },
      {
        re: /\b(?:write|tell|give|describe|create|generate)\s+(?:me\s+)?(?:an?\s+|some\s+)?(?:very\s+)?(?:explicit|erotic|graphic|steamy|nsfw|x-rated|pornographic|dirty|smutty|sexual)\s+(?:[\w'’-]+\s+){0,2}(?:story|scene|fanfic|fan fiction|roleplay|role-play|poem|description|chat|sexting)\b/,
        severity: 'medium',
        keys: [
          'explicit',
          'erotic',
          'steamy',
          'nsfw',
          'x-rated',
          'pornographic',
          'dirty',
          'smutty',
          'sexual',
        ],
      },
      {
        re: /\b(?:send|show|share)\s+(?:me\s+)?(?:your\s+)?(?:nudes|naked (?:pics|pictures|photos)|dick pics?|tits|boobs)\b/,
        severity: 'medium',
        keys: ['nudes', 'naked', 'pics', 'dick', 'tits', 'boobs'],
      },
      {
        re: /\b(?:watch|find|list|best|free|show me|send me|download|stream|link to|links to|recommend)\b[^.!?]{0,30}\b(?:porn|porno|pornography|xxx|nsfw (?:videos?|pics|sites?))\b/,
        keys: ['porn', 'porno', 'pornography', 'xxx', 'nsfw'],
        severity: 'medium',
      },
      {
        re: /\b(?:graphic|explicit|vivid|lurid|intimate) (?:sexual )?detail\b[^.!?]{0,80}\b(?:sex|sexual|naked|nude|orgasm|moan\w*|undress\w*|erotic)\b|\b(?:sex|sexual|naked|nude|orgasm|erotic)\b[^.!?]{0,80}\b(?:graphic|explicit|vivid|lurid) (?:sexual )?detail\b|\b(?:graphic|explicit|vivid|lurid) sexual detail\b/,
        keys: [
          'sex',
          'sexual',
          'naked',
          'nude',
          'orgasm',
          'moan',
          'moaned',
          'moaning',
          'undressed',
          'undressing',
          'erotic',
        ],
        severity: 'medium',
      },
      // Sex described rather than talked about: nudity with moaning, sex "until" or "all night".
      {
        re: /\b(?:naked|nude|undress\w*)\b[^.!?]{0,80}\bmoan\w*|\bmoan\w*[^.!?]{0,80}\b(?:naked|nude|undress\w*)\b|\b(?:had|have|having) sex\b[^.!?]{0,20}\b(?:until|all night|again and again)\b/,
        keys: ['naked', 'nude', 'undressed', 'undressing', 'moan', 'moaned', 'moaning', 'sex'],
        severity: 'medium',
      },
      // Minors in a sexual context; sexual violence described.
      {
        re: /\b(?:child|children|kid|kids|minor|minors|underage|preteen|\d{1,2}[- ]year[- ]olds?|schoolgirl|schoolboy|little (?:girl|boy))\b[^.!?]{0,60}\b(?:sex|sexual|sexy|naked|nude|porn\w*|erotic|aroused|horny|seduc\w*|molest\w*)|\b(?:sex|sexual|sexy|naked|nude|porn\w*|erotic|aroused|horny|seduc\w*|molest\w*)\b[^.!?]{0,60}\b(?:child|children|kid|kids|minor|minors|underage|preteen|\d{1,2}[- ]year[- ]olds?|schoolgirl|schoolboy|little (?:girl|boy))\b/,
        severity: 'high',
        keys: MINOR_KEYS,
      },
      {
        re: /\b(?:forced?|forcing|pinned)\s+(?:her|him|them|me)\s+(?:down\s+)?(?:to have sex|into sex|and raped|and fucked|to undress)|\b(?:raped|fucked) her while she (?:screamed|cried|begged|was unconscious|was asleep)/,
        severity: 'high',
        keys: ['forced', 'forcing', 'pinned', 'raped', 'fucked'],
      },
    ],
  },
  hate: {
    words: {
      'nigger|niggers|nigga|niggas|faggot|faggots|fag|fags|kike|kikes|spic|spics|chink|chinks|tranny|trannies|wetback|wetbacks|raghead|ragheads|towelhead|towelheads|gook|gooks|coon|coons|dyke|dykes|retard|retards|sandnigger|beaner|beaners': 2.5,
      'subhuman|subhumans|untermensch': 1.5,
      'vermin|parasites|cockroaches|savages|mongrels': 0.6,
      'inferior|degenerate|degenerates': 0.5,
      'racist|racists|racism|bigot|bigots|bigotry|antisemitism|antisemitic|islamophobia|islamophobic|homophobia|homophobic|transphobia|transphobic|xenophobia|xenophobic|segregation|hate speech|hate crime|hate crimes|slur|slurs': 1,
      'hatred|hate': 0.2,
      'nazi|nazis|neo-nazi': 0.4,
      'master race|white power|white supremacy|white supremacist|ethnic cleansing|race war': 1.2,
      'heil hitler|sieg heil|1488': 2.5,
      'holocaust|genocide': 0.2,
      'final solution': 1,
      'go back': 0,
      [GROUP_KEYS.join('|')]: 0,
    },
    patterns: [
      // Dehumanising or contemptuous generalisations about a group.
      {
        re: re(
          `\\b${G}\\s+(?:are|is|were|r)\\s+(?:all\\s+|just\\s+|nothing but\\s+|basically\\s+|literally\\s+|a bunch of\\s+|like\\s+)?(?:\\w+\\s+)?(?:animals|vermin|parasites|rats|cockroaches|subhuman|savages|inferior|disgusting|filth|filthy|trash|garbage|scum|a disease|a plague|a cancer|criminals|rapists|terrorists|thieves|lazy|stupid|dumb|evil|degenerates?|not (?:real )?(?:human|people)|less than human|monkeys|apes|pigs|dogs|mentally ill|freaks|an abomination|abominations|invaders|a virus|leeches|worthless)\\b`,
        ),
        severity: 'medium',
        keys: GROUP_KEYS,
      },
      {
        re: re(
          `\\b${G}\\s+(?:don't|do not|shouldn't|should not)\\s+(?:belong|deserve (?:rights|respect|to live|to vote)|count as (?:human|people))|\\bgo back to (?:your|where you|where they|their) (?:own )?(?:country|countries|came from|jungle|desert)|\\b(?:i hate|we hate|i despise|fuck (?:all )?(?:the )?)\\s*(?:all\\s+)?${G}\\b`,
        ),
        severity: 'medium',
        keys: [...GROUP_KEYS, 'go back'],
      },
      {
        re: re(
          `\\b${G}\\s+(?:should|must|shouldn't|should not|must not)\\s+(?:not\\s+)?(?:be allowed to|be permitted to|have the right to)\\s+(?:vote|work|marry|live|teach|exist|own)\\b`,
        ),
        severity: 'medium',
        keys: GROUP_KEYS,
      },
      // Calls for violence or removal.
      {
        re: re(
          `\\b(?:kill|exterminate|gas|eradicate|wipe out|get rid of|deport|purge|cleanse|lynch|hang|burn|shoot|eliminate|round up|sterili[sz]e|remove)\\s+(?:(?:all|every|the|those|these|of the)\\s+){0,2}(?:fucking\\s+|filthy\\s+|damn\\s+)?${G}\\b`,
        ),
        severity: 'high',
        keys: GROUP_KEYS,
      },
      {
        re: re(
          `\\b${G}\\s+(?:should|must|need to|ought to|deserve to|have to)\\s+(?:all\\s+)?(?:be\\s+)?(?:die|killed|exterminated|gassed|wiped out|eradicated|shot|hanged|hung|lynched|burned|burnt|deported|sterili[sz]ed|removed|eliminated|rounded up|put in camps)\\b`,
        ),
        severity: 'high',
        keys: GROUP_KEYS,
      },
      {
        re: /\b(?:ethnic cleansing|genocide|the holocaust) (?:is|was|would be) (?:good|necessary|justified|the answer|the solution|a good thing|deserved)|\bthe holocaust (?:never happened|is a (?:hoax|lie|myth))|\bfinal solution\b|\brace war now\b/,
        severity: 'high',
        keys: ['ethnic cleansing', 'genocide', 'holocaust', 'final solution', 'race war'],
      },
    ],
  },
};

/**
 * Marks of a joke or hyperbole ("lol", "haha", "jk", a laughing emoji): a threat in such a text is low
 * rather than medium (instructions and worse are not lowered).
 */
export const JEST = /\b(?:lol|lmao|rofl|haha\w*|hehe\w*|jk|just kidding|kidding)\b|😂|🤣|😆|;\)|:\)|:d\b/;

/** The speaker harming themself: these words count for self_harm, not for violence. */
export const SELF_DIRECTED =
  /\b(?:kill|killed|killing|hurt|hurting|cut|cutting|harm|harming|starve|starving|shoot|hang|hanging|stab|stabbing|poison|poisoning|burn|burning)\s+(?:myself|yourself|oneself|herself|himself|themselves)\b/g;

export interface Harmless {
  /** Lexicon words of which one must be in the text for `re` to run. */
  keys: readonly string[];
  re: RegExp;
}

const NOT_A_PERSON =
  '(?!(?:you|him|her|them|me|us|myself|yourself|himself|herself|themselves|everyone|everybody|people|someone|somebody)\\b)';

/**
 * Harmless uses of the lexicon's words, blanked out before scoring: software ("kill the process"),
 * idioms ("killed it", "dying to see"), medicine and education ("breast cancer", "sex education").
 */
export const HARMLESS: readonly Harmless[] = [
  {
    keys: ['kill', 'kills', 'killed', 'killing', 'killer'],
    re: new RegExp(
      `\\bkill(?:s|ed|ing)?\\s+(?:-\\d+\\s+)?(?:${NOT_A_PERSON}[\\w.-]+\\s+){0,3}(?:process(?:es)?|tasks?|jobs?|threads?|servers?|sessions?|pids?|commands?|apps?|applications?|programs?|containers?|pods?|tabs?|quer(?:y|ies)|connections?|scripts?|switch|workers?|daemons?|services?|instances?|signals?|builds?|requests?|lights|engine|music|mood|vibe|conversation|weeds?|bacteria|germs|mold|mould|pests?|insects|bugs|flies|two birds with one stone)\\b|\\bkill -\\w+|\\bkill(?:ed|ing)? it\\b|\\bkill (?:switch|chain|screen|count|feed|zone)\\b|\\bkiller (?:app|feature|whale|whales|bees|instinct|deal|heels|sudoku)\\b|\\bkilling time\\b|\\b(?:is|are|was|were|it's|that's|they're) killing me\\b`,
      'g',
    ),
  },
  {
    keys: ['dying', 'die', 'dead', 'died'],
    re: /\bdying (?:to (?:see|know|try|meet|hear|read|go)|of (?:laughter|boredom|embarrassment|curiosity))\b|\bdie (?:roll|rolls|casting|cast|cut|hard)\b|\bdead (?:code|links?|end|battery|pixels?|heat|center|centre|weight|serious|tired|last)\b|\bbattery (?:died|is dead)\b|\b(?:the|my|our) (?:phone|laptop|car|battery|plant|plants|engine|server|disk|drive) (?:died|is dying|is dead)\b/g,
  },
  {
    keys: ['shot', 'shoot', 'shooting', 'shoots'],
    re: /\bshot (?:glass|glasses|clock|put|of espresso|of whiskey|of vodka|list)\b|\b(?:mug|head|flu|booster|big|long|good|nice|great|camera|photo|screen) ?shots?\b|\bshoot(?:s|ing)? (?:a |the |some |with |for )?(?:photos?|pictures?|video|film|movie|scene|footage|portraits?|wedding|hoops|the breeze|an email|a message|me a message|me an email)\b|\bphoto ?shoot\b|\bshoot(?:ing)? for the (?:moon|stars)\b/g,
  },
  {
    keys: ['execute', 'executed', 'execution'],
    re: /\bexecut(?:e|ed|es|ing|ion) (?:the |a |this |that |your |my )?(?:code|query|queries|script|command|commands|function|program|plan|order|trade|trades|contract|task|job|statement|tests?|binary|file|request)\b|\b(?:sql|code|remote code|command|query) execution\b/g,
  },
  {
    keys: ['beat', 'beaten', 'beating'],
    re: /\bbeat(?:ing)? (?:the|a|my|your) (?:record|deadline|odds|traffic|heat|game|level|boss|competition|market|eggs|egg whites|batter)\b|\bbeat(?:en)? (?:eggs|egg whites|the mixture)\b/g,
  },
  {
    keys: ['bomb', 'bombs', 'bombed'],
    re: /\bbomb(?:ed)? (?:the|my|an?) (?:exam|test|interview|audition)\b|\bphoto ?bomb\w*\b|\bbath bombs?\b|\bbomb(?:s|ed)?\.?\s+(?:at|in) the box office\b|\bthe bomb\.com\b/g,
  },
  {
    keys: ['cut', 'cutting', 'cuts'],
    re: /\b(?:cut|cuts|cutting) (?:the |a |an |some |your |my |back |down |off |costs?|prices?|taxes|onions?|paper|hair|corners|ties|the cord|and paste|& paste)/g,
  },
  {
    keys: ['breasts', 'sex', 'sexual'],
    re: /\bchicken breasts?\b|\bsex (?:education|ed|chromosomes?|differences|ratio|cells|hormones|determination|discrimination|offenders? registry)\b|\bsexual (?:health|harassment|orientation|reproduction|dimorphism|selection|education|abuse prevention)\b|\bgender and sex\b|\b(?:biological|assigned|opposite|same|male|female|either) sex\b/g,
  },
  {
    keys: ['hang', 'hanging'],
    re: /\b(?:hang|hanging) (?:out|up|on|in there|a picture|a painting|the laundry|clothes|around)\b/g,
  },
  {
    keys: ['end', 'ending'],
    re: /\bend(?:ing)? (?:the|this|a|our|my|your) (?:\w+ )?(?:process|session|call|meeting|meetings|loop|stream|line|file|day|week|month|year|contract|relationship|subscription|game|war|quarter|sprint)\b/g,
  },
  {
    keys: ['suicide'],
    re: /\bsuicide (?:squad|doors?)\b/g,
  },
  { keys: ['assault'], re: /\bassault rifle ban\b/g },
];
