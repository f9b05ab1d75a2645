/**
 * The GPU icon of the sidebar tab, the command and the status-bar item: a graphics card
 * (bracket, board with two fans, edge connector), style/icons/gpu.svg. Its `jp-icon3`
 * class lets the theme recolour it.
 */
import { LabIcon } from '@jupyterlab/ui-components';

import gpuSvg from '../../style/icons/gpu.svg';

export const gpuIcon = new LabIcon({ name: 'gpu-widgets:gpu', svgstr: gpuSvg });
