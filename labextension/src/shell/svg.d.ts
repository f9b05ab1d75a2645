// The JupyterLab builder loads .svg files imported from TypeScript as their source text.
declare module '*.svg' {
  const svg: string;
  export default svg;
}
