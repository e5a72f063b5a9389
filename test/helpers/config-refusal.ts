// The message custody.json's parser refuses a configuration with, asserting
// that it was refused, and refused as config_invalid.
import { expect } from 'chai';
import { parseConfig } from '../../supervisor/config/load.js';

export function configRefusal(input: unknown): string {
  try {
    parseConfig(input);
  } catch (error) {
    expect(error).to.have.property('code', 'config_invalid');
    return (error as Error).message;
  }
  return expect.fail(`${JSON.stringify(input)} was accepted`);
}
