// The client library's types say what the service answers: each answer
// schema's output (supervisor/api/answers.ts, the same schemas the OpenAPI
// description is generated from) must be assignable to the client's type.
// tsc checks this when the tests build, so a field the service adds or a
// null it may send that the client's types miss fails the build; the test
// below only records that it was checked.
import { expect } from 'chai';
import type { z } from 'zod';
import type * as answers from '../../../supervisor/api/answers.js';
import type { ChildStatus, Grant, Health, OperationSummary, Status, Tools } from '../../../supervisor/client/index.js';

type Output<T extends z.ZodType> = z.output<T>;
type Assignable<From, To> = [From] extends [To] ? true : false;

const checks: Record<string, true> = {
  health: true satisfies Assignable<Output<typeof answers.healthAnswer>, Health>,
  status: true satisfies Assignable<Output<typeof answers.statusAnswer>, Status>,
  child: true satisfies Assignable<Output<typeof answers.childAnswer>, ChildStatus>,
  // Every field the service sends is one the client's type names (a missing one would be invisible to typed code).
  childFields: true satisfies Assignable<keyof Output<typeof answers.childAnswer>, keyof ChildStatus>,
  statusFields: true satisfies Assignable<keyof Output<typeof answers.statusAnswer>, keyof Status>,
  operation: true satisfies Assignable<Output<typeof answers.operationsAnswer>['operations'][number], OperationSummary>,
  operationFields: true satisfies Assignable<keyof Output<typeof answers.operationsAnswer>['operations'][number], keyof OperationSummary>,
  grant: true satisfies Assignable<Output<typeof answers.grantAnswer>, Grant>,
  tools: true satisfies Assignable<Output<typeof answers.toolsAnswer>, Tools>,
  healthFields: true satisfies Assignable<keyof Output<typeof answers.healthAnswer>, keyof Health>,
  serviceFields: true satisfies Assignable<keyof Output<typeof answers.statusAnswer>['service'], keyof Status['service']>,
  grantFields: true satisfies Assignable<keyof Output<typeof answers.grantAnswer>, keyof Grant>,
  toolsFields: true satisfies Assignable<keyof Output<typeof answers.toolsAnswer>, keyof Tools>,
  toolFields: true satisfies Assignable<keyof Output<typeof answers.toolsAnswer>['tools'][number], keyof Tools['tools'][number]>,
};

describe('the client library\'s types', () => {
  it('admit every answer the service\'s schemas describe (checked by tsc at build)', () => {
    expect(Object.keys(checks)).to.have.length(14);
  });
});
