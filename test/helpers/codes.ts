// The error code a call fails with: what most refusal tests assert on.
import { CustodyError } from '../../shared/errors.js';

/** The code a synchronous call throws, or undefined when it returns. */
export function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
    return undefined;
  } catch (error) {
    return (error as { code?: string }).code;
  }
}

/** The code a promise rejects with, or 'answered' when it resolves. */
export async function codeOfAnswer(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    return String((error as { code?: string }).code);
  }
  return 'answered';
}

/** The error a promise rejects with (code and message), failing the test when it resolves. */
export async function refusalOf(promise: Promise<unknown>): Promise<{ code: string; message: string }> {
  try {
    await promise;
  } catch (error) {
    const { code, message } = error as { code?: unknown; message?: unknown };
    return { code: String(code), message: String(message) };
  }
  throw new Error('expected a refusal, got an answer');
}

/** The CustodyError a promise rejects with; fails the test when it resolves or rejects with anything else. */
export async function refused(promise: Promise<unknown>): Promise<CustodyError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof CustodyError) return error;
    throw error;
  }
  throw new Error('expected a refusal, got an answer');
}
