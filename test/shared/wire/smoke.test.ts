import { expect } from 'chai';
import { startFixture } from '../../helpers/children.js';

describe('smoke', () => {
  it('talks to the fixture', async () => {
    const child = await startFixture();
    expect(child.hello.id).to.equal('fixture');
    const pong = await child.channel.request('ping', {});
    expect(pong.now).to.be.a('number');
    expect(await child.channel.request('echo', { a: [1, 2, { b: null }] })).to.deep.equal({ a: [1, 2, { b: null }] });
    await child.channel.request('shutdown', {});
    expect(await child.exited).to.deep.equal({ code: 0, signal: null });
  });
});
