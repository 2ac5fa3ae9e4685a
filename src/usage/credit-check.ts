import type { GantryConfig } from '../config/types.js';
import { GantryError } from '../errors.js';
import type { Services } from '../services.js';
import { creditRefusal } from './credits.js';

/**
 * Refuses a billable call the account cannot pay for: 402 PAYMENT_REQUIRED on a negative balance,
 * 402 INSUFFICIENT_CREDITS when `needed` is more than it holds. A credit store that does not answer in
 * time gets the limiter's failure policy (503 when closed). Shared by inference tickets and predictions.
 */
export async function assertCredits(
  services: Services,
  config: GantryConfig,
  accountId: string,
  needed: number,
  what: 'request' | 'prediction',
): Promise<void> {
  const balance = await services.balance(accountId);
  if (balance === undefined) {
    services.metrics.limiterFailures.inc({ policy: config.limits.failurePolicy });
    if (config.limits.failurePolicy === 'closed') {
      throw new GantryError('SERVICE_UNAVAILABLE', {
        message: 'The credit store is unavailable and this gateway is set to refuse requests meanwhile',
        headers: { 'retry-after': '1' },
      });
    }
    return;
  }
  const refusal = creditRefusal(balance, needed);
  if (refusal) {
    throw new GantryError(refusal, {
      details:
        refusal === 'PAYMENT_REQUIRED'
          ? 'The account balance is negative: add credits to continue.'
          : `This ${what} may cost up to ${needed} credits, more than the account holds.`,
    });
  }
}
